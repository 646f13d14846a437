// Verifies one step of two requests with specdec::verify_logits_host alone: a greedy request whose drafts follow the
// target's argmax (both accepted, then the bonus token) and one whose first draft is not the argmax (rejected, the
// argmax recovered).
#include <cstdio>
#include <vector>

#include "specdec/verify/host.hpp"

int main() {
  constexpr std::int64_t V = 4;
  // request 0: drafts {2, 1}, rows argmax 2, 1, 3; request 1: draft {0}, rows argmax 3, 0
  const std::vector<float> logits = {0, 0, 5, 0,  0, 5, 0, 0,  0, 0, 0, 5,  0, 0, 0, 5,  5, 0, 0, 0};
  const std::vector<std::int64_t> ids = {2, 1, 0}, cu = {0, 2, 3}, seeds = {1, 2}, positions = {10, 20};
  const std::vector<float> temperature = {0.0f, 0.0f};
  std::vector<float> workspace(logits.size());
  specdec::HostVerifyArgs a;
  a.target_logits = logits.data();
  a.target_logits_stride = V;
  a.vocab_size = V;
  a.draft_token_ids = ids;
  a.cu_num_draft_tokens = cu;
  a.temperature = temperature;
  a.seeds = seeds;
  a.positions = positions;
  a.workspace = workspace.data();
  try {
    const specdec::HostVerifyResult r = specdec::verify_logits_host(a);
    const std::vector<std::int64_t> want = {2, 1, 3, 3, -1, -1};
    std::printf("verify consumer: accepted %d and %d, tokens", r.num_accepted[0], r.num_accepted[1]);
    for (auto t : r.output_token_ids) std::printf(" %lld", static_cast<long long>(t));
    std::printf("\n");
    const bool ok = r.status[0] == 0 && r.status[1] == 0 && r.num_accepted[0] == 2 && r.num_accepted[1] == 0 &&
                    r.output_token_ids == want;
    a.vocab_size = 0;  // a named error, not an abort
    try {
      specdec::verify_logits_host(a);
      return 1;
    } catch (const specdec::error& e) {
      std::printf("verify consumer: %s\n", e.what());
    }
    return ok ? 0 : 1;
  } catch (const specdec::error& e) {
    std::printf("verify consumer: unexpected error: %s\n", e.what());
    return 1;
  }
}
