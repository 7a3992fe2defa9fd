# The `slow:install and examples` test (cmake -P): installs the already built kiln to a temporary
# prefix, checks the pkg-config file, configures examples/ against the installed package
# (find_package(kiln CONFIG REQUIRED)), builds the three examples and runs them; any failing
# step fails the test with its output. Prints the seconds from `cmake --install` to the first
# example running. Inputs: -DKILN_BUILD=<build dir> -DKILN_SOURCE=<source dir>.
cmake_minimum_required(VERSION 3.25)
set(prefix "${KILN_BUILD}/install-test/prefix")
set(ex_build "${KILN_BUILD}/install-test/examples")
file(REMOVE_RECURSE "${KILN_BUILD}/install-test")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("---- ${what}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
endfunction()

string(TIMESTAMP t0 "%s")
run("cmake --install" ${CMAKE_COMMAND} --install "${KILN_BUILD}" --prefix "${prefix}")
foreach(f include/kiln/kiln.h include/kiln/engine/train/train_step.h lib/cmake/kiln/kilnConfig.cmake
          lib/cmake/kiln/kilnTargets.cmake lib/pkgconfig/kiln.pc)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install: ${prefix}/${f} is missing")
  endif()
endforeach()
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
  run("pkg-config kiln" ${PKG_CONFIG} --print-errors --cflags --libs kiln)
endif()
set(launcher)
find_program(CCACHE ccache)
if(CCACHE)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE})
endif()
run("configure examples/ against the installed package" ${CMAKE_COMMAND} -S "${KILN_SOURCE}/examples" -B "${ex_build}"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}" ${launcher})
run("build the examples" ${CMAKE_COMMAND} --build "${ex_build}" -j2)
string(TIMESTAMP t1 "%s")
math(EXPR secs "${t1} - ${t0}")
message("---- from cmake --install to a running example: ${secs} s")
set(ENV{OMP_NUM_THREADS} 1)
run("custom_cnn" "${ex_build}/custom_cnn")
run("own_loop" "${ex_build}/own_loop")
run("predict_memory" "${ex_build}/predict_memory")
