// The `kiln` command (placeholder until the subcommands land).
#include <cstdio>
int main() {
  std::puts("kiln: no subcommands yet");
  return 0;
}
