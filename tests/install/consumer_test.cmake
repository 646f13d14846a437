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

# The README's whole-program example against the installed package (needs the libtorch parts).
if(WITH_TORCH)
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/minimal -B ${WORK_DIR}/minimal -G ${GENERATOR}
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/minimal)
endif()
