# bench_model: decode throughput of the Llama model (SmolLM2-135M) against this machine's memory read bandwidth.
if(TARGET specdec::torch_models)
  add_executable(bench_model ${CMAKE_CURRENT_LIST_DIR}/bench_model.cpp)
  target_link_libraries(bench_model PRIVATE specdec::models specdec::torch_models specdec::cpu benchmark::benchmark)
  target_compile_definitions(bench_model PRIVATE SPECDEC_MODELS_DIR="${PROJECT_SOURCE_DIR}/models")
  specdec_warnings(bench_model)
endif()
