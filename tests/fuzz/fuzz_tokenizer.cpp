// libFuzzer target: the tokenizer on arbitrary bytes and arbitrary ids, with the bundled model's vocabulary (read once in
// LLVMFuzzerInitialize; SPECDEC_FUZZ_GGUF names another GGUF file, e.g. Gemma's SentencePiece one) or a small built-in one
// when the model is absent. SentencePiece text is compared after the round trip only where it must come back: valid
// UTF-8 (a malformed lead byte can swallow part of an escaped space) without U+2581 (which decodes to a space) and no
// space prefix.
// Input: one flag byte (bit 0 parse_special, bit 1 add_special, bit 2 skip_special for decoding, bit 3 raw ids), then the
// text, which is also read as little-endian 16-bit token ids. Checked: encode() never fails and decode(encode(s)) == s minus
// the bytes without a token; decode() fails exactly when an id is out of range and otherwise equals the pieces; the streaming
// decoder adds up to decode(). Any other outcome (a crash, a sanitizer report, another exception) is a bug. Run:
// scripts/fuzz.sh tokenizer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"

namespace sm = specdec::models;
namespace sf = specdec::fuzz;

namespace {
const sm::Tokenizer* g_tokenizer = nullptr;
bool g_compare_text = false;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static const sf::FuzzVocabulary vocabulary = sf::load_fuzz_vocabulary();
  g_tokenizer = vocabulary.tokenizer.get();
  g_compare_text = sf::specials_keep_all_bytes(*g_tokenizer);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const sm::Tokenizer& tok = *g_tokenizer;
  const std::uint8_t flags = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  // Arbitrary bytes.
  const sm::EncodeOptions options{.add_special = (flags & 2) != 0, .parse_special = (flags & 1) != 0};
  bool compare = g_compare_text;
  if (tok.model() == sm::TokenizerModel::kSentencePiece)
    compare = compare && !tok.add_space_prefix() && text.find("\xE2\x96\x81") == std::string_view::npos &&
              sf::valid_utf8(text);
  sf::check_round_trip(tok, text, options, compare);

  // Arbitrary ids: raw 16-bit values shifted down by 16 (some negative, some past the vocabulary), or folded into
  // [-1, vocab_size] so that most are valid.
  const bool skip_special = (flags & 4) != 0;
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
    const auto v = static_cast<std::int32_t>(static_cast<std::uint8_t>(text[i]) | (static_cast<std::uint8_t>(text[i + 1]) << 8));
    ids.push_back((flags & 8) != 0 ? v - 16 : v % (tok.vocab_size() + 2) - 1);
  }
  bool any_invalid = false;
  std::string expected;
  std::vector<std::int32_t> valid;
  for (auto id : ids) {
    if (id < 0 || id >= tok.vocab_size()) {
      any_invalid = true;
      continue;
    }
    valid.push_back(id);
    if (!(skip_special && tok.token_type(id) == sm::TokenType::kControl)) expected += tok.token_to_piece(id);
  }
  bool threw = false;
  try {
    const std::string decoded = tok.decode(ids, skip_special);
    SPECDEC_FUZZ_CHECK(decoded == expected);
  } catch (const specdec::error&) {
    threw = true;
  }
  SPECDEC_FUZZ_CHECK(threw == any_invalid);
  sm::StreamingDecoder stream(tok, skip_special);
  std::string streamed;
  for (auto id : ids) {
    try {
      streamed += stream.push(id);
      SPECDEC_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    } catch (const specdec::error&) {
      SPECDEC_FUZZ_CHECK(id < 0 || id >= tok.vocab_size());
    }
  }
  streamed += stream.flush();
  SPECDEC_FUZZ_CHECK(streamed == expected);
  return 0;
}
