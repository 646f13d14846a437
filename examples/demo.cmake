# specdec-demo: the verifier on a small built-in example, explained in words and numbers.
add_executable(specdec-demo ${CMAKE_CURRENT_LIST_DIR}/demo.cpp)
target_link_libraries(specdec-demo PRIVATE specdec::core fmt::fmt)
specdec_warnings(specdec-demo)
