// The bundled SmolLM2-135M GGUF on specdec's CPU model (specdec::models) in the decoder loop with the suffix proposer and
// with the bundled EAGLE head (specdec::proposers), in a program that links no libtorch: a greedy chat answer decoded
// speculatively gives the tokens of plain decoding with either.
#include <cstdio>
#include <string>
#include <vector>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/models/chat_template.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/proposers/eagle.hpp"
#include "specdec/proposers/suffix.hpp"

namespace sd = specdec::decoder;
namespace sm = specdec::models;

template <class Proposer>
sd::GenerationResult run(Proposer& p, sm::LlamaModel& target, const std::vector<std::int64_t>& prompt,
                         const std::vector<std::int64_t>& stop, int g) {
  sd::GenerationRequest r;
  r.prompt = prompt;
  r.stop_token_ids = stop;
  r.max_new_tokens = 48;
  r.params.temperature = 0.0f;
  sd::DecoderOptions o;
  o.num_speculative_tokens = g;
  sd::SpeculativeDecoder dec(p, target, o);
  return dec.generate({&r, 1}).front();
}

int main() {
  try {
    const sm::GgufFile file(SPECDEC_MODEL);
    const sm::Tokenizer tokenizer = sm::Tokenizer::from_gguf(file);
    const std::vector<sm::ChatMessage> chat = {
        {"user", "Repeat this list exactly: apples, pears, plums, cherries, apples, pears, plums, cherries."}};
    const std::string text = sm::ChatTemplate::from_gguf(file).apply(chat, /*add_generation_prompt=*/true);
    const std::vector<std::int32_t> ids = tokenizer.encode(text, {.add_special = true, .parse_special = true});
    const std::vector<std::int64_t> prompt(ids.begin(), ids.end());
    const std::vector<std::int32_t> eog = tokenizer.end_of_generation_ids();
    const std::vector<std::int64_t> stop(eog.begin(), eog.end());
    sm::LlamaModel target = sm::load_llama_gguf(SPECDEC_MODEL);
    specdec::proposers::NoProposer none;
    specdec::proposers::SuffixProposer suffix;
    specdec::proposers::EagleHeadOptions ho;
    ho.quantize_weights = true;  // Q8_0 on the target's packed kernels, as specdec-generate runs it
    specdec::proposers::EagleProposerOptions eo;
    eo.target_num_layers = target.config().num_layers;
    specdec::proposers::EagleProposer eagle(
        specdec::proposers::load_eagle_head(SPECDEC_EAGLE_HEAD, specdec::proposers::eagle_target_weights_from_gguf(SPECDEC_MODEL), ho),
        eo);
    const sd::GenerationResult plain = run(none, target, prompt, stop, 0);
    const sd::GenerationResult spec = run(suffix, target, prompt, stop, 4);
    const sd::GenerationResult learned = run(eagle, target, prompt, stop, 4);
    if (spec.tokens != plain.tokens || learned.tokens != plain.tokens) {
      std::printf("models consumer: speculative tokens differ from plain decoding (suffix %s, EAGLE %s)\n",
                  spec.tokens == plain.tokens ? "equal" : "differ", learned.tokens == plain.tokens ? "equal" : "differ");
      return 1;
    }
    std::printf("models consumer: EAGLE head: %lld drafts accepted\n", static_cast<long long>(learned.metrics.accepted));
    const std::vector<std::int32_t> out(spec.tokens.begin(), spec.tokens.end());
    std::printf("models consumer: %zu tokens equal to plain decoding, %lld drafts accepted: %s\n", out.size(),
                static_cast<long long>(spec.metrics.accepted), tokenizer.decode(out, /*skip_special=*/true).c_str());
    return spec.metrics.accepted > 0 && learned.metrics.accepted > 0 ? 0 : 1;
  } catch (const specdec::error& e) {
    std::printf("models consumer: %s\n", e.what());
    return 1;
  }
}
