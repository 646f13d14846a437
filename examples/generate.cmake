# specdec-generate: the CLI on a real model (default: the bundled SmolLM2-135M-Instruct GGUF).
if(TARGET specdec_decoder)
  find_package(CLI11 REQUIRED)
  add_executable(specdec-generate ${CMAKE_CURRENT_LIST_DIR}/generate.cpp)
  target_link_libraries(specdec-generate PRIVATE specdec::decoder specdec::models CLI11::CLI11 fmt::fmt
                                                 nlohmann_json::nlohmann_json)
  if(TARGET specdec_proposers)
    target_link_libraries(specdec-generate PRIVATE specdec::proposers)
    target_compile_definitions(specdec-generate PRIVATE SPECDEC_HAVE_EAGLE)
  endif()
  target_compile_definitions(specdec-generate PRIVATE SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  specdec_warnings(specdec-generate)
endif()
