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

# Torch-free consumers, each built with the C++ compiler and find_package(specdec COMPONENTS <component>...): neither the
# compile and link lines nor the binary may name libtorch, c10, fmt, nlohmann_json or OpenMP (fmt and nlohmann_json
# allowed with WITH_FORMATS, for the model formats' consumers).
#   verify: the CPU verification alone; decoder: the decoder loop and the n-gram proposer around a plain C++ target;
#   models: the bundled GGUF on the CPU model with its tokenizer, in the decoder loop with the suffix proposer.
function(torch_free_consumer name library)
  set(_forbidden "torch|c10|libfmt|-lfmt|/fmt/|nlohmann|openmp|gomp|libomp")
  set(_forbidden_libs "libtorch|libc10|libfmt|libgomp|libomp|nlohmann")
  if(ARGN STREQUAL "WITH_FORMATS")
    set(_forbidden "torch|c10|openmp|gomp|libomp")
    set(_forbidden_libs "libtorch|libc10|libgomp|libomp")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/${name}_consumer -B ${WORK_DIR}/${name} -G ${GENERATOR}
                          -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DSPECDEC_SOURCE_DIR=${SOURCE_DIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} consumer: configure failed\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/${name} --target ${name}_consumer --verbose
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} consumer: build failed\n${out}\n${err}")
  endif()
  if(out MATCHES "(${_forbidden})")
    message(FATAL_ERROR "${name} consumer: the compile or link line names '${CMAKE_MATCH_1}'\n${out}")
  endif()
  if(NOT out MATCHES "${library}")
    message(FATAL_ERROR "${name} consumer: expected ${library} on the link line\n${out}")
  endif()
  run(${WORK_DIR}/${name}/${name}_consumer)
  find_program(_ldd ldd)
  if(_ldd)
    execute_process(COMMAND ${_ldd} ${WORK_DIR}/${name}/${name}_consumer OUTPUT_VARIABLE libs)
    string(REGEX REPLACE "\\(0x[0-9a-f]+\\)" "" libs "${libs}")  # the load addresses, which are hex digits
    if(libs MATCHES "(${_forbidden_libs})")
      message(FATAL_ERROR "${name} consumer: the binary loads '${CMAKE_MATCH_1}'\n${libs}")
    endif()
  endif()
endfunction()
torch_free_consumer(verify libspecdec_verify)
torch_free_consumer(decoder libspecdec_decoder)
torch_free_consumer(models libspecdec_models WITH_FORMATS)

# The README's whole-program example against the installed package (torch-free: the CPU model and the decoder).
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/minimal -B ${WORK_DIR}/minimal -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/minimal)
