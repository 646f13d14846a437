# bench_host_probe: the host's clock, 512-bit vpdpbusd throughput beside float multiplies / conversions / integer ops,
# and two threads' rate against one (torch-free stand-alone loops; docs/results-log.md).
add_executable(bench_host_probe ${CMAKE_CURRENT_LIST_DIR}/host_probe.cpp)
find_package(Threads REQUIRED)
target_link_libraries(bench_host_probe PRIVATE Threads::Threads)
specdec_warnings(bench_host_probe)
# bench_torch_rss: the resident memory a process holds for linking libtorch alone (docs/results-log.md: peak RSS).
if(SPECDEC_WITH_TORCH)
  add_executable(bench_torch_rss ${CMAKE_CURRENT_LIST_DIR}/torch_rss.cpp)
  target_link_libraries(bench_torch_rss PRIVATE ${TORCH_LIBRARIES})
  specdec_warnings(bench_torch_rss)
endif()
