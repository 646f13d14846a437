// specdec::cuda — chain and tree verification instantiated for __nv_bfloat16 probabilities (int32 and int64 ids).
#define SPECDEC_CUDA_INSTANTIATING 1
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/tree_verify.cuh"

namespace specdec::cuda {

template Status chain_verify<__nv_bfloat16, std::int32_t>(const ChainVerifyParams<__nv_bfloat16, std::int32_t>&, void*, std::size_t,
                                                  cudaStream_t);
template Status chain_verify<__nv_bfloat16, std::int64_t>(const ChainVerifyParams<__nv_bfloat16, std::int64_t>&, void*, std::size_t,
                                                  cudaStream_t);
template Status tree_verify<__nv_bfloat16, std::int32_t>(const TreeVerifyParams<__nv_bfloat16, std::int32_t>&, void*, std::size_t,
                                                 cudaStream_t);
template Status tree_verify<__nv_bfloat16, std::int64_t>(const TreeVerifyParams<__nv_bfloat16, std::int64_t>&, void*, std::size_t,
                                                 cudaStream_t);

}  // namespace specdec::cuda
