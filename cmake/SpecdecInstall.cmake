include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/specdec DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(_specdec_export_targets specdec_core specdec_verify)
foreach(_t specdec_model_io specdec_cpu specdec_models specdec_torch specdec_torch_models specdec_proposers specdec_decoder specdec_train specdec_cuda specdec_cuda_headers)
  if(TARGET ${_t})
    list(APPEND _specdec_export_targets ${_t})
  endif()
endforeach()

install(TARGETS ${_specdec_export_targets} EXPORT specdecTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT specdecTargets NAMESPACE specdec:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/specdec)

set(SPECDEC_EXPORTED_TORCH OFF)
if(TARGET specdec_torch)
  set(SPECDEC_EXPORTED_TORCH ON)
endif()
set(SPECDEC_EXPORTED_CUDA OFF)
if(TARGET specdec_cuda)
  set(SPECDEC_EXPORTED_CUDA ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/specdecConfig.cmake.in
  ${PROJECT_BINARY_DIR}/specdecConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/specdec)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/specdecConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/specdecConfig.cmake ${PROJECT_BINARY_DIR}/specdecConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/specdec)
