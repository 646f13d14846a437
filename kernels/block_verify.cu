// specdec::cuda — block verification (include/specdec/cuda/block_verify.cuh) instantiated for float, half and bfloat16
// probabilities with int32 and int64 ids: the launcher and its host-side argument checks declared in
// include/specdec/cuda/verify_api.hpp.
#define SPECDEC_CUDA_INSTANTIATING 1
#include "specdec/cuda/block_verify.cuh"

namespace specdec::cuda {

#define SPECDEC_CUDA_BLOCK_INSTANTIATE(ProbT, IdT)                                                                  \
  template VerifyResult block_verify_check_arguments<ProbT, IdT>(const BlockVerifyParams<ProbT, IdT>&);            \
  template Status block_verify<ProbT, IdT>(const BlockVerifyParams<ProbT, IdT>&, void*, std::size_t, cudaStream_t);
SPECDEC_CUDA_BLOCK_INSTANTIATE(float, std::int32_t)
SPECDEC_CUDA_BLOCK_INSTANTIATE(float, std::int64_t)
SPECDEC_CUDA_BLOCK_INSTANTIATE(__half, std::int32_t)
SPECDEC_CUDA_BLOCK_INSTANTIATE(__half, std::int64_t)
SPECDEC_CUDA_BLOCK_INSTANTIATE(__nv_bfloat16, std::int32_t)
SPECDEC_CUDA_BLOCK_INSTANTIATE(__nv_bfloat16, std::int64_t)
#undef SPECDEC_CUDA_BLOCK_INSTANTIATE

}  // namespace specdec::cuda
