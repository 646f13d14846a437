// The README's whole-program example (kept identical to it; tests/install builds it against the installed package).
#include <cstdio>
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/proposers/ngram.hpp"

int main() try {
  const char* path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  auto target = specdec::models::load_llama_gguf(path);
  auto tokenizer = specdec::models::Tokenizer::from_gguf(specdec::models::GgufFile(path));
  specdec::proposers::NgramProposer ngram;                                  // prompt lookup, no draft model
  specdec::decoder::DecoderOptions options;
  options.num_speculative_tokens = 5;                                       // g
  specdec::decoder::SpeculativeDecoder decoder(ngram, target, options);
  specdec::decoder::GenerationRequest request;
  for (int id : tokenizer.encode("def fib(n):\n    if n < 2:\n        return n\n")) request.prompt.push_back(id);
  request.params.temperature = 0.0f;                                        // greedy: equals plain decoding
  request.max_new_tokens = 64;
  const auto results = decoder.generate({&request, 1});
  std::vector<std::int32_t> ids(results[0].tokens.begin(), results[0].tokens.end());
  std::printf("%s\n%.2f tokens per target forward\n", tokenizer.decode(ids).c_str(),
              decoder.metrics().total.mean_accepted_length());
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());                           // specdec never aborts
  return 1;
}
