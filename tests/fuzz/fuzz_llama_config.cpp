// libFuzzer target: the Hugging Face config.json reader (llama_config_from_hf_json_text) and the RoPE frequencies of a config it
// accepts. Any specdec::error is an expected outcome; a crash, a sanitizer report, another exception or an accepted config
// that breaks LlamaConfig::validate()'s promises is a bug. Run: scripts/fuzz.sh llama_config.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_common.hpp"
#include "specdec/models/llama_config.hpp"

namespace sm = specdec::models;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto c = sm::llama_config_from_hf_json_text({reinterpret_cast<const char*>(data), size}, "fuzz/config.json");
    SPECDEC_FUZZ_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0);
    SPECDEC_FUZZ_CHECK(c.num_heads > 0 && c.num_kv_heads > 0 && c.head_dim > 0 && c.num_heads % c.num_kv_heads == 0);
    SPECDEC_FUZZ_CHECK(c.max_position_embeddings > 0 && c.rms_norm_eps > 0.0 && c.rope_theta > 0.0);
    if (c.bos_token_id) SPECDEC_FUZZ_CHECK(*c.bos_token_id >= 0 && *c.bos_token_id < c.vocab_size);
    for (auto id : c.eos_token_ids) SPECDEC_FUZZ_CHECK(id >= 0 && id < c.vocab_size);
    c.validate();
    if (c.head_dim <= 4096) {
      const auto inv = sm::rope_inverse_frequencies(c, c.head_dim);
      SPECDEC_FUZZ_CHECK(inv.size() == static_cast<std::size_t>(c.head_dim / 2));
    }
  } catch (const specdec::error&) {
  }
  return 0;
}
