# The KV cache alone (specdec::models, torch-free: also in the torch-free sanitizer run).
if(TARGET specdec::models)
  specdec_add_test(test_models_kv_cache SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kv_cache.cpp LIBS specdec::models)
endif()
# The CPU Llama model (specdec::models) against ATen references (specdec::torch_models).
if(TARGET specdec::torch_models)
  specdec_add_test(test_models_llama
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_llama.cpp
            ${CMAKE_CURRENT_SOURCE_DIR}/test_llama_gguf.cpp ${CMAKE_CURRENT_SOURCE_DIR}/test_llama_packed.cpp
            ${CMAKE_CURRENT_SOURCE_DIR}/test_attention_half.cpp ${CMAKE_CURRENT_SOURCE_DIR}/test_llama_archs.cpp
    LIBS specdec::models specdec::torch_models)
  target_compile_definitions(test_models_llama PRIVATE SPECDEC_MODELS_DIR="${PROJECT_SOURCE_DIR}/models")
  # The packed forward's batch invariance (a token alone, in a chain, a tree of any size, a prompt) on the other
  # instruction-set paths (each skips if the CPU lacks it: the model then runs on the best path it has, which the plain
  # run covers already).
  set(_invariance SmolLM2.PackedForwardIsBatchInvariant SmolLM2.PromptForwardHasTheBitsOfDecodingTokenByToken
                  SmolLM2.TreesOfMoreThanSixteenNodesKeepEachPathsBits LlamaArchs.PackedForwardWithOptionsIsBatchInvariant
                  LlamaArchs.SlidingLayersIgnoreKeysBeyondTheWindow)
  string(JOIN ":" _invariance_filter ${_invariance})
  foreach(_isa avx2 avx-vnni portable avx512-vnni amx)
    add_test(NAME SmolLM2.PackedForwardIsBatchInvariant_${_isa}
             COMMAND test_models_llama --gtest_filter=${_invariance_filter})
    set_tests_properties(SmolLM2.PackedForwardIsBatchInvariant_${_isa} PROPERTIES ENVIRONMENT SPECDEC_CPU_ISA=${_isa} TIMEOUT 600)
  endforeach()
  # The float16 cache's attention on the 8-lane kernel too (the plain run takes AVX-512 where the CPU has it).
  foreach(_test HalfKeysAndValuesGiveTheBitsOfTheirFloatValues EachRowGetsTheBitsItGetsAlone)
    add_test(NAME AttentionRows.${_test}_avx2 COMMAND test_models_llama --gtest_filter=AttentionRows.${_test})
    set_tests_properties(AttentionRows.${_test}_avx2 PROPERTIES ENVIRONMENT SPECDEC_CPU_ISA=avx2)
  endforeach()

  # Small random-weight models of each GGUF architecture written by PyPI's gguf (llama.cpp's writer) for
  # LlamaArchsGguf.*: with the llama.cpp virtualenv's Python (.deps/llama-venv), setup's (.deps/gguf-venv) or the system's; the script writes
  # nothing where the package is missing (the test then skips).
  set(_specdec_models_py "${PROJECT_SOURCE_DIR}/.deps/llama-venv/bin/python")
  if(NOT EXISTS "${_specdec_models_py}")
    set(_specdec_models_py "${PROJECT_SOURCE_DIR}/.deps/gguf-venv/bin/python")  # scripts/setup.sh installs it
  endif()
  if(NOT EXISTS "${_specdec_models_py}")
    find_package(Python3 COMPONENTS Interpreter QUIET)
    set(_specdec_models_py "${Python3_EXECUTABLE}")
  endif()
  if(_specdec_models_py)
    set(_specdec_models_dir "${CMAKE_CURRENT_BINARY_DIR}/gguf-py-models")
    add_test(NAME gguf_py_models
             COMMAND "${_specdec_models_py}" "${CMAKE_CURRENT_SOURCE_DIR}/write_gguf_models.py" "${_specdec_models_dir}")
    set_tests_properties(gguf_py_models PROPERTIES FIXTURES_SETUP gguf_models)
    add_test(NAME LlamaArchsGguf.PackedForwardMatchesTheReferenceOnEachFile_fixtures
             COMMAND test_models_llama --gtest_filter=LlamaArchsGguf.*)
    set_tests_properties(LlamaArchsGguf.PackedForwardMatchesTheReferenceOnEachFile_fixtures PROPERTIES
                         FIXTURES_REQUIRED gguf_models ENVIRONMENT SPECDEC_GGUF_MODEL_FIXTURES=${_specdec_models_dir})
  endif()

  # The Llama block on ATen ops (any device), against LlamaModel and through the decoder.
  if(TARGET specdec::decoder)
    specdec_add_test(test_aten_llama SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_aten_llama.cpp LIBS specdec::decoder specdec::proposers specdec::torch_models)
    target_compile_definitions(test_aten_llama PRIVATE SPECDEC_MODELS_DIR="${PROJECT_SOURCE_DIR}/models")
  endif()

  # Helper for scripts/validate-model.sh: tokenizes prompts and dumps logits / greedy continuations for an independent check.
  add_executable(specdec-dump-logits ${CMAKE_CURRENT_SOURCE_DIR}/test_llama_dump_logits.cpp)
  target_link_libraries(specdec-dump-logits PRIVATE specdec::models specdec::torch_models)
  specdec_warnings(specdec-dump-logits)
  # Helper for scripts/oracle-logits.sh: logits of token-id prompts, compared with llama.cpp's.
  add_executable(specdec-logits-tool ${CMAKE_CURRENT_SOURCE_DIR}/logits_tool.cpp)
  target_link_libraries(specdec-logits-tool PRIVATE specdec::models specdec::torch_models)
  specdec_warnings(specdec-logits-tool)
endif()
