// specdec::cuda — chain and tree verification instantiated for float probabilities (int32 and int64 ids).
#define SPECDEC_CUDA_INSTANTIATING 1
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/tree_verify.cuh"

namespace specdec::cuda {

template Status chain_verify<float, std::int32_t>(const ChainVerifyParams<float, std::int32_t>&, void*, std::size_t,
                                                  cudaStream_t);
template Status chain_verify<float, std::int64_t>(const ChainVerifyParams<float, std::int64_t>&, void*, std::size_t,
                                                  cudaStream_t);
template Status tree_verify<float, std::int32_t>(const TreeVerifyParams<float, std::int32_t>&, void*, std::size_t,
                                                 cudaStream_t);
template Status tree_verify<float, std::int64_t>(const TreeVerifyParams<float, std::int64_t>&, void*, std::size_t,
                                                 cudaStream_t);

}  // namespace specdec::cuda
