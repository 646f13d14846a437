// specdec::cuda — chain and tree verification instantiated for __nv_bfloat16 probabilities (int32 and int64 ids): the
// launchers and their host-side argument checks declared in include/specdec/cuda/verify_api.hpp.
#define SPECDEC_CUDA_INSTANTIATING 1
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/tree_verify.cuh"

namespace specdec::cuda {

#define SPECDEC_CUDA_CHAIN_TREE_INSTANTIATE(ProbT, IdT)                                                          \
  template VerifyResult chain_verify_check_arguments<ProbT, IdT>(const ChainVerifyParams<ProbT, IdT>&);        \
  template Status chain_verify<ProbT, IdT>(const ChainVerifyParams<ProbT, IdT>&, void*, std::size_t, cudaStream_t); \
  template VerifyResult tree_verify_check_arguments<ProbT, IdT>(const TreeVerifyParams<ProbT, IdT>&);          \
  template Status tree_verify<ProbT, IdT>(const TreeVerifyParams<ProbT, IdT>&, void*, std::size_t, cudaStream_t);
SPECDEC_CUDA_CHAIN_TREE_INSTANTIATE(__nv_bfloat16, std::int32_t)
SPECDEC_CUDA_CHAIN_TREE_INSTANTIATE(__nv_bfloat16, std::int64_t)
#undef SPECDEC_CUDA_CHAIN_TREE_INSTANTIATE

}  // namespace specdec::cuda
