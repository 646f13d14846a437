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
  add_executable(specdec-generate ${CMAKE_CURRENT_LIST_DIR}/generate.cpp ${_specdec_build_info})
  add_dependencies(specdec-generate specdec-build-info)
  target_link_libraries(specdec-generate PRIVATE specdec::decoder specdec::models CLI11::CLI11 fmt::fmt
                                                 nlohmann_json::nlohmann_json)
  if(TARGET specdec_proposers)
    target_link_libraries(specdec-generate PRIVATE specdec::proposers)
    target_compile_definitions(specdec-generate PRIVATE SPECDEC_HAVE_EAGLE)
  endif()
  target_compile_definitions(specdec-generate PRIVATE SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  specdec_warnings(specdec-generate)
endif()
