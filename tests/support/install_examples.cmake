# The `slow:install and examples` test (cmake -P): installs the already built kiln to a temporary
# prefix and checks that the installed headers are exactly the public headers and their include closure
# (engine/api/public_headers.cmake), with no kernels/ or tools/ header; checks the pkg-config file,
# configures examples/ against the installed package (find_package(kiln CONFIG REQUIRED)), builds the
# examples and runs them; then kills train_run inside its second training-state write (mid-epoch) and
# checks that --resume gives the weights of an uninterrupted run, byte for byte. Any failing step fails
# the test with its output. Prints the seconds from `cmake --install` to the first example running.
# Inputs: -DKILN_BUILD=<build dir> -DKILN_SOURCE=<source dir>.
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
foreach(f include/kiln/kiln.h include/kiln/run.h include/kiln/engine/train/train_step.h lib/cmake/kiln/kilnConfig.cmake
          lib/cmake/kiln/kilnTargets.cmake lib/pkgconfig/kiln.pc)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install: ${prefix}/${f} is missing")
  endif()
endforeach()
# The installed headers: exactly the closure of the public ones, nothing of kernels/ or tools/.
include("${KILN_SOURCE}/engine/api/public_headers.cmake")
kiln_public_headers(closure "${KILN_SOURCE}")
set(expected)
foreach(h IN LISTS closure)
  if(h MATCHES "^(kernels|tools)/")
    message(FATAL_ERROR "public headers: ${h} is in the include closure of engine/api/*.h (a kernels/ or tools/ header)")
  endif()
  string(REGEX REPLACE "^engine/api/" "" h "${h}")
  list(APPEND expected "${h}")
endforeach()
file(GLOB_RECURSE installed RELATIVE "${prefix}/include/kiln" "${prefix}/include/kiln/*")
list(SORT expected)
list(SORT installed)
if(NOT installed STREQUAL expected)
  set(extra ${installed})
  list(REMOVE_ITEM extra ${expected})
  set(missing ${expected})
  list(REMOVE_ITEM missing ${installed})
  message(FATAL_ERROR "install: include/kiln/ is not the public closure; extra: ${extra}; missing: ${missing}")
endif()
list(LENGTH expected n_headers)
message("---- include/kiln/: ${n_headers} headers, the closure of engine/api/*.h")
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

# train_run: an uninterrupted run (A), then one killed inside its second training-state write (B: the
# state of step 5 is on disk, the epoch has 12 steps), resumed: the same weights, byte for byte.
set(data "$ENV{TMPDIR}")
if(NOT data)
  set(data "/tmp")
endif()
set(data "${data}/kiln_custom_cnn_data")  # custom_cnn's synthetic folder (train/ 48 images, val/ 24)
set(runs "${KILN_BUILD}/install-test/train_run")
run("train_run (uninterrupted)" "${ex_build}/train_run" "${data}" "${runs}/a")
file(SIZE "${runs}/a/checkpoint.safetensors" state_bytes)
math(EXPR kill_at "${state_bytes} + ${state_bytes} / 2")
execute_process(COMMAND ${CMAKE_COMMAND} -E env KILN_TEST_KILL_WRITE_AT=${kill_at} "${ex_build}/train_run" "${data}" "${runs}/b"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("---- train_run killed at byte ${kill_at} of its training-state writes (exit ${rc})\n${out}${err}")
if(rc EQUAL 0 OR EXISTS "${runs}/b/weights.safetensors")
  message(FATAL_ERROR "train_run was not killed (exit ${rc})")
endif()
file(READ "${runs}/b/checkpoint.safetensors" head OFFSET 8 LIMIT 65536)  # the JSON header after its length
if(NOT head MATCHES "\"step_in_epoch\":\"5\"")
  message(FATAL_ERROR "train_run: the state left by the killed run is not the mid-epoch one of step 5")
endif()
run("train_run --resume" "${ex_build}/train_run" "${data}" "${runs}/b" --resume)
run("the resumed weights equal the uninterrupted run's" ${CMAKE_COMMAND} -E compare_files
    "${runs}/a/weights.safetensors" "${runs}/b/weights.safetensors")
