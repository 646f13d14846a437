# Installs specdec from BUILD_DIR into a scratch prefix, then builds and runs the consumer project twice:
# with find_package(specdec) against that prefix, and with add_subdirectory(SOURCE_DIR).
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
foreach(mode find_package add_subdirectory)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/${mode} -G ${GENERATOR}
      -DCMAKE_BUILD_TYPE=Release -DSPECDEC_CONSUMER_MODE=${mode} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
      -DSPECDEC_SOURCE_DIR=${SOURCE_DIR} -DSPECDEC_EXPECT_TORCH=${WITH_TORCH} -DSPECDEC_WITH_CUDA=OFF)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/${mode} --target consumer)
  run(${WORK_DIR}/${mode}/consumer)
endforeach()

# The torch-free verifier alone: built with the C++ compiler and find_package(specdec COMPONENTS verify); neither its
# compile and link lines nor its binary may name libtorch, c10, fmt, nlohmann_json or OpenMP.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/verify_consumer -B ${WORK_DIR}/verify -G ${GENERATOR}
                        -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "verify consumer: configure failed\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/verify --target verify_consumer --verbose
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "verify consumer: build failed\n${out}\n${err}")
endif()
if(out MATCHES "(torch|c10|libfmt|-lfmt|/fmt/|nlohmann|openmp|gomp|libomp)")
  message(FATAL_ERROR "verify consumer: the compile or link line names '${CMAKE_MATCH_1}'\n${out}")
endif()
if(NOT out MATCHES "libspecdec_verify")
  message(FATAL_ERROR "verify consumer: expected libspecdec_verify on the link line\n${out}")
endif()
run(${WORK_DIR}/verify/verify_consumer)
find_program(_ldd ldd)
if(_ldd)
  execute_process(COMMAND ${_ldd} ${WORK_DIR}/verify/verify_consumer OUTPUT_VARIABLE libs)
  string(REGEX REPLACE "\\(0x[0-9a-f]+\\)" "" libs "${libs}")  # the load addresses, which are hex digits
  if(libs MATCHES "(libtorch|libc10|libfmt|libgomp|libomp|nlohmann)")
    message(FATAL_ERROR "verify consumer: the binary loads '${CMAKE_MATCH_1}'\n${libs}")
  endif()
endif()

# The README's whole-program example against the installed package (needs the libtorch parts).
if(WITH_TORCH)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/minimal -B ${WORK_DIR}/minimal -G ${GENERATOR}
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/minimal)
endif()
