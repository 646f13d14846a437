// specdec::cuda — workspace sizes of the chain, tree and block verifiers (declared in
// include/specdec/cuda/verify_api.hpp): the bytes the launchers carve, from the same carving functions.
#include "specdec/cuda/block_verify.cuh"
#include "specdec/cuda/chain_verify.cuh"
#include "specdec/cuda/tree_verify.cuh"

namespace specdec::cuda {

std::size_t chain_verify_workspace_size(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                        std::int64_t vocab_size) {
  std::size_t bytes = 0;
  detail::carve_chain_workspace(nullptr, batch_size, num_draft_tokens, vocab_size, &bytes);
  return bytes;
}

std::size_t tree_verify_workspace_size(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                       std::int64_t vocab_size) {
  std::size_t bytes = 0;
  detail::carve_tree_workspace(nullptr, batch_size, num_draft_tokens, vocab_size, &bytes);
  return bytes;
}

std::size_t block_verify_workspace_size(std::int64_t batch_size, std::int64_t num_draft_tokens,
                                        std::int64_t vocab_size) {
  std::size_t bytes = 0;
  detail::carve_block_workspace(nullptr, batch_size, num_draft_tokens, vocab_size, &bytes);
  return bytes;
}

}  // namespace specdec::cuda
