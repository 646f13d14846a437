# bench_replay: draft-length policies and lookup proposers replayed on the bundled model's recorded greedy outputs, each
# forward charged its profiled cost (no timing noise), against the ceiling of perfectly cut drafts.
if(TARGET specdec::decoder AND TARGET specdec::torch_models)
  add_executable(bench_replay ${CMAKE_CURRENT_LIST_DIR}/bench_replay.cpp)
  target_link_libraries(bench_replay PRIVATE specdec::decoder specdec::proposers specdec::torch_models specdec::models fmt::fmt nlohmann_json::nlohmann_json)
  target_compile_definitions(bench_replay PRIVATE SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  specdec_warnings(bench_replay)
endif()
