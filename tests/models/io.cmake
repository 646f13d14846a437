# specdec::model_io tests: GGUF, safetensors, config.json, tokenizer, chat template (no torch).
if(TARGET specdec_model_io)
  specdec_add_test(specdec_io_tests
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_io_gguf.cpp ${CMAKE_CURRENT_LIST_DIR}/test_io_safetensors.cpp
            ${CMAKE_CURRENT_LIST_DIR}/test_io_tokenizer.cpp ${CMAKE_CURRENT_LIST_DIR}/test_io_prompt_file.cpp
    LIBS specdec::model_io nlohmann_json::nlohmann_json)
  target_compile_definitions(specdec_io_tests PRIVATE
    SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}" SPECDEC_IO_TEST_DATA="${CMAKE_CURRENT_LIST_DIR}/data")

  # GGUF files written by PyPI's gguf (llama.cpp's writer) for LlamaConfigGguf.FilesWrittenByGgufPy: with the llama.cpp
  # virtualenv's Python (.deps/llama-venv), setup's (.deps/gguf-venv) or the system's; the script writes nothing where the package is missing.
  set(_specdec_gguf_py "${PROJECT_SOURCE_DIR}/.deps/llama-venv/bin/python")
  if(NOT EXISTS "${_specdec_gguf_py}")
    set(_specdec_gguf_py "${PROJECT_SOURCE_DIR}/.deps/gguf-venv/bin/python")  # scripts/setup.sh installs it
  endif()
  if(NOT EXISTS "${_specdec_gguf_py}")
    find_package(Python3 COMPONENTS Interpreter QUIET)
    set(_specdec_gguf_py "${Python3_EXECUTABLE}")
  endif()
  if(_specdec_gguf_py)
    set(_specdec_gguf_dir "${CMAKE_CURRENT_BINARY_DIR}/gguf-py-fixtures")
    add_test(NAME gguf_py_fixtures
             COMMAND "${_specdec_gguf_py}" "${CMAKE_CURRENT_LIST_DIR}/write_gguf_fixtures.py" "${_specdec_gguf_dir}")
    set_tests_properties(gguf_py_fixtures PROPERTIES FIXTURES_SETUP gguf_py)
    add_test(NAME LlamaConfigGguf.FilesWrittenByGgufPy_fixtures
             COMMAND specdec_io_tests --gtest_filter=LlamaConfigGguf.FilesWrittenByGgufPy)
    set_tests_properties(LlamaConfigGguf.FilesWrittenByGgufPy_fixtures PROPERTIES FIXTURES_REQUIRED gguf_py
                         ENVIRONMENT SPECDEC_GGUF_PY_FIXTURES=${_specdec_gguf_dir})
  endif()

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
  target_compile_definitions(test_models_packed PRIVATE SPECDEC_IO_TEST_DATA="${CMAKE_CURRENT_LIST_DIR}/data")
endif()
