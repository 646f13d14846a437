# specdec::model_io tests: GGUF, safetensors, config.json, tokenizer, chat template (no torch).
if(TARGET specdec_model_io)
  specdec_add_test(specdec_io_tests
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_io_gguf.cpp ${CMAKE_CURRENT_LIST_DIR}/test_io_safetensors.cpp
            ${CMAKE_CURRENT_LIST_DIR}/test_io_tokenizer.cpp
    LIBS specdec::model_io nlohmann_json::nlohmann_json)
  target_compile_definitions(specdec_io_tests PRIVATE
    SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}" SPECDEC_IO_TEST_DATA="${CMAKE_CURRENT_LIST_DIR}/data")

  # Reads JSON strings (one per line) on stdin, prints their token ids; used by scripts/validate-tokenizer.sh.
  add_executable(specdec_tokenize_tool ${CMAKE_CURRENT_LIST_DIR}/tokenize_tool.cpp)
  target_link_libraries(specdec_tokenize_tool PRIVATE specdec::model_io nlohmann_json::nlohmann_json)
  specdec_warnings(specdec_tokenize_tool)

  # libFuzzer target over the GGUF parser and dequantiser (clang only; scripts/fuzz-gguf.sh builds it standalone too).
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND SPECDEC_BUILD_FUZZERS)
    add_executable(specdec_fuzz_gguf ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_gguf.cpp)
    target_link_libraries(specdec_fuzz_gguf PRIVATE specdec::model_io)
    target_compile_options(specdec_fuzz_gguf PRIVATE -fsanitize=fuzzer)
    target_link_options(specdec_fuzz_gguf PRIVATE -fsanitize=fuzzer)
  endif()
endif()

# The torch-free CPU kernels (specdec::cpu): packed block-format products; also in the sanitizer build.
if(TARGET specdec_cpu)
  specdec_add_test(test_models_packed SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_packed_matrix.cpp LIBS specdec::cpu)
endif()
