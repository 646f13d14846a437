# bench_decoder: the speculative decoder's per-step overhead (everything but the model forwards) with SmolLM2-135M.
if(TARGET specdec::decoder AND TARGET specdec::torch_models)
  add_executable(bench_decoder ${CMAKE_CURRENT_LIST_DIR}/bench_decoder.cpp)
  target_link_libraries(bench_decoder PRIVATE specdec::decoder specdec::proposers specdec::torch_models benchmark::benchmark)
  target_compile_definitions(bench_decoder PRIVATE SPECDEC_MODELS_DIR="${PROJECT_SOURCE_DIR}/models")
  specdec_warnings(bench_decoder)
endif()
