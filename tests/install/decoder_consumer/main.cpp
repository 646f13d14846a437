// The decoder loop around a target written in plain C++ (examples/plain-target/plain_lm.hpp), with the n-gram proposer:
// two greedy requests decoded speculatively give the tokens of plain decoding, and some drafts are accepted.
#include <cstdio>
#include <vector>

#include "plain_lm.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/proposers/ngram.hpp"

namespace sd = specdec::decoder;

template <class Proposer>
std::vector<sd::GenerationResult> run(Proposer& p, plain::PlainLM& target, int g) {
  std::vector<sd::GenerationRequest> rs(2);
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 16; ++i) rs[b].prompt.push_back((i * (3 + b)) % 7 + 1);
    rs[b].max_new_tokens = 40;
    rs[b].params.temperature = 0.0f;
  }
  sd::DecoderOptions o;
  o.num_speculative_tokens = g;
  sd::SpeculativeDecoder dec(p, target, o);
  return dec.generate(rs);
}

int main() {
  try {
    plain::PlainLM target(32, 5);
    specdec::proposers::NoProposer none;
    specdec::proposers::NgramProposer ngram;
    const auto plain_out = run(none, target, 0);
    const auto spec_out = run(ngram, target, 4);
    long long accepted = 0;
    for (std::size_t b = 0; b < plain_out.size(); ++b) {
      if (spec_out[b].tokens != plain_out[b].tokens) {
        std::printf("decoder consumer: request %zu: speculative tokens differ from plain decoding\n", b);
        return 1;
      }
      accepted += spec_out[b].metrics.accepted;
    }
    std::printf("decoder consumer: %zu requests equal to plain decoding, %lld drafts accepted\n", plain_out.size(), accepted);
    return accepted > 0 ? 0 : 1;
  } catch (const specdec::error& e) {
    std::printf("decoder consumer: %s\n", e.what());
    return 1;
  }
}
