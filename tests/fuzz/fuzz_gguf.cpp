// libFuzzer target: the GGUF parser, the metadata accessors, the dequantiser, the LlamaConfig reader and the tokenizer built
// from whatever metadata the input holds. Any specdec::error is an expected outcome; anything else (a crash, a sanitizer
// report, another exception escaping) is a bug. Build and run with scripts/fuzz-gguf.sh.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "specdec/models/gguf.hpp"
#include "specdec/models/llama_config.hpp"
#include "specdec/models/tokenizer.hpp"

namespace sm = specdec::models;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = sm::GgufFile::from_bytes({reinterpret_cast<const std::byte*>(data), size});
    for (const auto& key : file.metadata_keys()) {
      try {
        (void)file.get_integer(key);
      } catch (const specdec::error&) {
      }
      try {
        (void)file.get_string_array(key);
      } catch (const specdec::error&) {
      }
      try {
        (void)file.get_double_array(key);
      } catch (const specdec::error&) {
      }
    }
    std::int64_t budget = 1 << 22;  // floats dequantised per input
    for (const auto& t : file.tensors()) {
      if (!sm::can_dequantize(t.type) || t.num_elements > budget) continue;
      budget -= t.num_elements;
      (void)file.dequantize(t);
    }
    try {
      (void)sm::llama_config_from_gguf(file);
    } catch (const specdec::error&) {
    }
    try {
      const auto tok = sm::Tokenizer::from_gguf(file);
      const std::string text = "Hello, world! 123 \xF0\x9F\x98\x80 <|im_start|>  \n\n x\xff";
      for (bool special : {false, true}) {
        const auto ids = tok.encode(text, {.add_special = true, .parse_special = special});
        (void)tok.decode(ids);
        sm::StreamingDecoder dec(tok);
        for (auto id : ids) (void)dec.push(id);
        (void)dec.flush();
      }
    } catch (const specdec::error&) {
    }
  } catch (const specdec::error&) {
  }
  return 0;
}
