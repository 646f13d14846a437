# bench_verify: the CPU verifier (core, one thread; torch front, all threads) against this machine's read bandwidth.
add_executable(bench_verify ${CMAKE_CURRENT_LIST_DIR}/bench_verify.cpp)
target_link_libraries(bench_verify PRIVATE specdec::core benchmark::benchmark)
if(TARGET specdec_torch)
  target_link_libraries(bench_verify PRIVATE specdec::torch)
  target_compile_definitions(bench_verify PRIVATE SPECDEC_BENCH_WITH_TORCH)
endif()
specdec_warnings(bench_verify)
