# bench_ngram: n-gram proposer lookup time at 1k / 32k / 256k tokens of context.
if(TARGET specdec::decoder AND TARGET specdec::proposers)
  add_executable(bench_ngram ${CMAKE_CURRENT_LIST_DIR}/bench_ngram.cpp)
  target_link_libraries(bench_ngram PRIVATE specdec::decoder specdec::proposers benchmark::benchmark)
  specdec_warnings(bench_ngram)
endif()
