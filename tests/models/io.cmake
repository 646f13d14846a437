# specdec::model_io tests: GGUF, safetensors, config.json, tokenizer, chat template (no torch).
if(TARGET specdec_model_io)
  specdec_add_test(specdec_io_tests
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_io_gguf.cpp ${CMAKE_CURRENT_LIST_DIR}/test_io_safetensors.cpp
            ${CMAKE_CURRENT_LIST_DIR}/test_io_tokenizer.cpp ${CMAKE_CURRENT_LIST_DIR}/test_io_prompt_file.cpp
    LIBS specdec::model_io nlohmann_json::nlohmann_json)
  target_compile_definitions(specdec_io_tests PRIVATE
    SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}" SPECDEC_IO_TEST_DATA="${CMAKE_CURRENT_LIST_DIR}/data")

  # Reads JSON strings (one per line) on stdin, prints their token ids; used by scripts/validate-tokenizer.sh.
  add_executable(specdec_tokenize_tool ${CMAKE_CURRENT_LIST_DIR}/tokenize_tool.cpp)
  target_link_libraries(specdec_tokenize_tool PRIVATE specdec::model_io nlohmann_json::nlohmann_json)
  specdec_warnings(specdec_tokenize_tool)

  # libFuzzer targets, one per parser (clang only; scripts/fuzz.sh builds and runs them standalone too).
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND SPECDEC_BUILD_FUZZERS)
    file(GLOB _specdec_fuzz_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_*.cpp)
    foreach(_src ${_specdec_fuzz_sources})
      get_filename_component(_name ${_src} NAME_WE)
      add_executable(specdec_${_name} ${_src})
      target_link_libraries(specdec_${_name} PRIVATE specdec::model_io)
      target_compile_definitions(specdec_${_name} PRIVATE SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
      target_compile_options(specdec_${_name} PRIVATE -fsanitize=fuzzer)
      target_link_options(specdec_${_name} PRIVATE -fsanitize=fuzzer)
    endforeach()
  endif()
endif()

# The torch-free CPU kernels (specdec::cpu): packed block-format products; also in the sanitizer build.
if(TARGET specdec_cpu)
  specdec_add_test(test_models_packed SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_packed_matrix.cpp
                   ${CMAKE_CURRENT_LIST_DIR}/test_row_pool.cpp ${CMAKE_CURRENT_LIST_DIR}/test_weight_arena.cpp
                   LIBS specdec::cpu)
endif()
