// doctest entry point shared by every test executable. CTest runs one test case per process
// (--test-case=NAME, from doctest_discover_tests); a filter that matches nothing would make
// doctest exit 0 having run nothing, so that is turned into a failure here: a test that did not
// run can never pass.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

unsigned g_matched = 0;  // test cases that passed the filters in the last run

struct CountMatched : doctest::IReporter {
  explicit CountMatched(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { g_matched = s.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("kiln_count_matched", 1, CountMatched);

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  int rc = ctx.run();
  if (ctx.shouldExit()) return rc;  // --help, --list-test-cases, ...
  bool filtered = false;
  for (int i = 1; i < argc; ++i)
    if (!std::strncmp(argv[i], "--test-case=", 12) || !std::strncmp(argv[i], "-tc=", 4)) filtered = true;
  if (rc == 0 && filtered && g_matched == 0) {
    std::fprintf(stderr,
                 "no test case matches the --test-case filter: nothing ran (a test name with ';' is split by CTest)\n");
    return 1;
  }
  return rc;
}
