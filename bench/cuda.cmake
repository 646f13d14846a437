# CUDA verification benchmarks (included by bench/CMakeLists.txt after find_package(benchmark)).
#   bench_verify_cuda        the kernels alone (built whenever specdec::cuda is)
#   bench_verify_cuda_torch  plus the torch-ops implementation of the same rule, when the libtorch found has CUDA
if(TARGET specdec_cuda)
  add_executable(bench_verify_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_verify_cuda.cu)
  target_link_libraries(bench_verify_cuda PRIVATE specdec::cuda specdec::cuda_headers benchmark::benchmark)

  if(SPECDEC_WITH_TORCH AND (CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES OR TARGET torch_cuda))
    add_executable(bench_verify_cuda_torch ${CMAKE_CURRENT_LIST_DIR}/bench_verify_cuda.cu)
    target_compile_definitions(bench_verify_cuda_torch PRIVATE SPECDEC_BENCH_WITH_TORCH=1)
    target_include_directories(bench_verify_cuda_torch PRIVATE ${TORCH_INCLUDE_DIRS})
    target_link_libraries(bench_verify_cuda_torch PRIVATE specdec::cuda specdec::cuda_headers benchmark::benchmark ${TORCH_LIBRARIES})
  endif()
endif()
