# specdec-custom-target: the decoder driving a user-written target model (examples/custom-target/tiny_transformer.hpp).
if(TARGET specdec_decoder AND TARGET specdec_torch_models)
  add_executable(specdec-custom-target ${CMAKE_CURRENT_LIST_DIR}/custom-target/main.cpp)
  target_link_libraries(specdec-custom-target PRIVATE specdec::decoder specdec::proposers specdec::torch_models)
  specdec_warnings(specdec-custom-target)
endif()
