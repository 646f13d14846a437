# specdec-train: builds a training set from the target and trains an EAGLE-1 head or a distilled draft model (libtorch, CPU).
if(TARGET specdec_train)
  find_package(CLI11 REQUIRED)
  add_executable(specdec-train ${CMAKE_CURRENT_LIST_DIR}/specdec-train.cpp)
  target_link_libraries(specdec-train PRIVATE specdec::train CLI11::CLI11)
  target_compile_definitions(specdec-train PRIVATE SPECDEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  specdec_warnings(specdec-train)
endif()
