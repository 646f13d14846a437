// specdec-custom-target: SpeculativeDecoder driving a target model the user wrote (tiny_transformer.hpp) with n-gram
// drafts, next to plain decoding of the same model; greedy output must be the same token for token.
//   specdec-custom-target [cpu|cuda]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/proposers/ngram.hpp"
#include "tiny_transformer.hpp"

int main(int argc, char** argv) try {
  const std::string device = argc > 1 ? argv[1] : "cpu";
  custom::TinyTransformer target(/*vocab=*/512, /*dim=*/64, /*seed=*/7, at::Device(device));

  specdec::decoder::GenerationRequest request;
  for (int i = 0; i < 48; ++i) request.prompt.push_back((i * 37) % 23 + 5);  // a repetitive prompt: n-gram lookup finds it
  request.max_new_tokens = 64;
  request.params.temperature = 0.0f;

  auto run = [&](auto& proposer, int g) {
    specdec::decoder::DecoderOptions options;
    options.num_speculative_tokens = g;
    specdec::decoder::SpeculativeDecoder decoder(proposer, target, options);
    const auto t0 = std::chrono::steady_clock::now();
    auto result = decoder.generate(std::vector{request});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-10s %3zu tokens, %3lld target forwards, %.1f ms\n", g ? "n-gram" : "plain", result[0].tokens.size(),
                static_cast<long long>(decoder.metrics().steps), 1e3 * s);
    return result[0].tokens;
  };
  specdec::proposers::NoProposer none;
  specdec::proposers::NgramProposer ngram;
  const auto plain = run(none, 0);
  const auto speculative = run(ngram, 5);
  std::printf("greedy outputs %s\n", plain == speculative ? "equal" : "DIFFER");
  return plain == speculative ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "specdec-custom-target: %s\n", e.what());
  return 1;
}
