# bench_drafts: a draft token's cost (EAGLE head, distilled draft model) as a fraction of a 1-token target forward.
if(TARGET specdec::decoder AND TARGET specdec::torch_models)
  add_executable(bench_drafts ${CMAKE_CURRENT_LIST_DIR}/bench_drafts.cpp)
  target_link_libraries(bench_drafts PRIVATE specdec::decoder specdec::proposers specdec::torch_models specdec::models benchmark::benchmark)
  target_compile_definitions(bench_drafts PRIVATE SPECDEC_MODELS_DIR="${PROJECT_SOURCE_DIR}/models")
  specdec_warnings(bench_drafts)
endif()
