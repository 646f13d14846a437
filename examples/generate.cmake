# specdec-generate: the CLI on a real model (default: the bundled SmolLM2-135M-Instruct GGUF).
if(TARGET specdec_decoder AND TARGET specdec_proposers)
  find_package(CLI11 REQUIRED)
  # The version and the git commit the binary was built from (its --json output records both), refreshed every build.
  set(_specdec_build_info ${CMAKE_CURRENT_BINARY_DIR}/specdec_build_info.cpp)
  add_custom_target(specdec-build-info
    COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUT=${_specdec_build_info} -DVERSION=${PROJECT_VERSION}
            -P ${PROJECT_SOURCE_DIR}/cmake/build-info.cmake
    BYPRODUCTS ${_specdec_build_info}
    COMMENT "specdec build info (version, git commit)")
  # specdec-generate links no libtorch; specdec-generate-torch (the same source with SPECDEC_GENERATE_TORCH) adds the
  # ATen forward for --device, and specdec-generate hands such runs to it.
  foreach(_gen specdec-generate specdec-generate-torch)
    if(_gen STREQUAL "specdec-generate-torch" AND NOT TARGET specdec_torch_models)
      continue()
    endif()
    add_executable(${_gen} ${CMAKE_CURRENT_LIST_DIR}/generate.cpp ${_specdec_build_info})
    add_dependencies(${_gen} specdec-build-info)
    target_link_libraries(${_gen} PRIVATE specdec::decoder specdec::models specdec::proposers CLI11::CLI11 fmt::fmt
                                          nlohmann_json::nlohmann_json)
    target_compile_definitions(${_gen} PRIVATE SPECDEC_HAVE_EAGLE SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
    specdec_warnings(${_gen})
  endforeach()
  if(TARGET specdec-generate-torch)
    target_link_libraries(specdec-generate-torch PRIVATE specdec::torch_models)
    target_compile_definitions(specdec-generate-torch PRIVATE SPECDEC_GENERATE_TORCH)
    add_dependencies(specdec-generate specdec-generate-torch)  # --device needs it beside specdec-generate
  endif()
endif()
