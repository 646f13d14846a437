// Must NOT compile: a type without observe() is not a Proposer; the decoder says so in a static_assert.
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/llama.hpp"

struct NotAProposer {
  void begin_request(const specdec::proposers::RequestContext&) {}
  void end_request(specdec::proposers::RequestId) {}
  specdec::proposers::DraftBatch propose(std::span<const specdec::proposers::ProposeRequest>) { return {}; }
};

int main() {
  return static_cast<int>(sizeof(specdec::decoder::SpeculativeDecoder<NotAProposer, specdec::models::LlamaModel>));
}
