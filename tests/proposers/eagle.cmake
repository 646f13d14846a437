# EAGLE heads, their checkpoints, the EAGLE-2 dynamic tree and the EagleProposer driven by SpeculativeDecoder.
if(TARGET specdec::torch_models)  # the tests' references use ATen
  set(_eagle_test_sources ${CMAKE_CURRENT_LIST_DIR}/test_eagle_head.cpp ${CMAKE_CURRENT_LIST_DIR}/test_eagle_tree.cpp)
  set(_eagle_test_libs specdec::proposers specdec::torch_models nlohmann_json::nlohmann_json)
  if(TARGET specdec::decoder)
    list(APPEND _eagle_test_sources ${CMAKE_CURRENT_LIST_DIR}/test_eagle_decoder.cpp ${CMAKE_CURRENT_LIST_DIR}/test_drafts_smollm2.cpp)
    list(APPEND _eagle_test_libs specdec::decoder)
  endif()
  specdec_add_test(test_proposers_eagle SOURCES ${_eagle_test_sources} LIBS ${_eagle_test_libs})
  target_compile_definitions(test_proposers_eagle PRIVATE SPECDEC_MODELS_DIR="${PROJECT_SOURCE_DIR}/models")
endif()
# The heads' rows (random heads, and the bundled drafts beside the real target) bit-identical alone, batched and in trees on
# the other instruction-set paths (a path the CPU lacks runs on the best one it has, which the plain run covers already).
if(TARGET test_proposers_eagle)
  foreach(_isa avx2 portable avx512-vnni)
    add_test(NAME EagleHeadForward.RowsAreBitIdenticalAloneBatchedAndInTrees_${_isa}
             COMMAND test_proposers_eagle
                     --gtest_filter=Heads/EagleHeadForward.RowsAreBitIdenticalAloneBatchedAndInTrees/*:DraftsSmolLM2.PackedDraftLogitsAreBatchInvariant)
    set_tests_properties(EagleHeadForward.RowsAreBitIdenticalAloneBatchedAndInTrees_${_isa} PROPERTIES ENVIRONMENT SPECDEC_CPU_ISA=${_isa})
  endforeach()
endif()
