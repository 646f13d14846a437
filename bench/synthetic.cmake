# bench_synthetic: the decoder's speedup against g at chosen acceptance rates (SyntheticProposer), beside the theory.
if(TARGET specdec::decoder AND TARGET specdec::torch_models)
  find_package(CLI11 REQUIRED)
  add_executable(bench_synthetic ${CMAKE_CURRENT_LIST_DIR}/bench_synthetic.cpp)
  target_link_libraries(bench_synthetic PRIVATE specdec::decoder specdec::models specdec::torch_models CLI11::CLI11 fmt::fmt
                                                nlohmann_json::nlohmann_json)
  target_compile_definitions(bench_synthetic PRIVATE SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  specdec_warnings(bench_synthetic)
endif()
