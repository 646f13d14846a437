// Shared by the libFuzzer targets: a failed property check, and the tokenizer the tokenizer and chat template targets use.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/models/chat_template.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/tokenizer.hpp"

namespace specdec::fuzz {

/// A property the code under test promised does not hold: report it and stop the run (libFuzzer saves the input).
#define SPECDEC_FUZZ_CHECK(cond)                                                                 \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);    \
      __builtin_trap();                                                                          \
    }                                                                                            \
  } while (0)

/// GPT-2's bytes_to_unicode: the byte-level form of a raw byte string.
inline std::string byte_level_text(std::string_view raw) {
  std::string out;
  for (unsigned char b : raw) {
    const auto direct = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174; };
    char32_t cp = b;
    if (!direct(b)) {
      int n = 0;
      for (int x = 0; x < b; ++x) n += direct(x) ? 0 : 1;
      cp = static_cast<char32_t>(256 + n);
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

/// A small byte-level vocabulary (every byte, a few English merges, ChatML control tokens and one user-defined token), used
/// when the bundled model is not there.
inline models::Tokenizer seed_tokenizer() {
  models::TokenizerSpec s;
  for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_level_text(std::string(1, static_cast<char>(b))));
  s.token_types.assign(s.tokens.size(), models::TokenType::kNormal);
  const std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {"e", "r"}, {" ", "a"}, {"o", "r"}, {"l", "d"}, {"or", "ld"},
      {" ", "w"}, {" w", "orld"}, {"\n", "\n"}, {" ", " "}, {"  ", "  "}, {"1", "2"}, {"'", "s"}, {"\xC3", "\xA9"}};
  for (const auto& [l, r] : merges) {
    const std::string t = byte_level_text(l + r);
    bool have = false;
    for (const auto& x : s.tokens) have = have || x == t;
    if (!have) {
      s.tokens.push_back(t);
      s.token_types.push_back(models::TokenType::kNormal);
    }
    s.merges.push_back(byte_level_text(l) + " " + byte_level_text(r));
  }
  for (const char* c : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    s.tokens.emplace_back(c);
    s.token_types.push_back(models::TokenType::kControl);
  }
  s.tokens.emplace_back("<tool>");
  s.token_types.push_back(models::TokenType::kUserDefined);
  const auto n = static_cast<std::int32_t>(s.tokens.size());
  s.bos_id = n - 4;  // <|endoftext|>
  s.eos_id = n - 2;  // <|im_end|>
  s.add_bos = true;
  s.pre_tokenizer = models::PreTokenizer::kSmollm;
  return models::Tokenizer(std::move(s));
}

struct FuzzVocabulary {
  std::unique_ptr<models::Tokenizer> tokenizer;
  std::unique_ptr<models::ChatTemplate> chat_template;  ///< the model's own, when read from the GGUF file
  std::string source;
};

/// The bundled model's tokenizer (SPECDEC_FUZZ_GGUF, else models/SmolLM2-135M-Instruct.Q4_1.gguf under the source tree), or
/// seed_tokenizer() when that file is absent.
inline FuzzVocabulary load_fuzz_vocabulary() {
  FuzzVocabulary v;
  std::filesystem::path path = std::filesystem::path(SPECDEC_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* env = std::getenv("SPECDEC_FUZZ_GGUF"); env != nullptr && *env != '\0') path = env;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    const models::GgufFile file(path);
    v.tokenizer = std::make_unique<models::Tokenizer>(models::Tokenizer::from_gguf(file));
    v.chat_template = std::make_unique<models::ChatTemplate>(models::ChatTemplate::from_gguf(file));
    v.source = path.string();
  } else {
    v.tokenizer = std::make_unique<models::Tokenizer>(seed_tokenizer());
    v.source = "the built-in seed vocabulary";
  }
  std::fprintf(stderr, "fuzz: tokenizer from %s (%d tokens)\n", v.source.c_str(), v.tokenizer->vocab_size());
  return v;
}

/// Whether `text` is valid UTF-8 (RFC 3629: no overlongs, surrogates or code points past U+10FFFF).
inline bool valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = 0, n = text.size(); i < n;) {
    const unsigned c = p[i];
    std::size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    std::uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static constexpr std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

/// `text` without the bytes the tokenizer has no token for (encode() drops them).
inline std::string without_dropped_bytes(const models::Tokenizer& tok, std::string_view text) {
  std::string out;
  for (char c : text)
    if (tok.has_byte_token(static_cast<unsigned char>(c))) out += c;
  return out;
}

/// Whether every control and user-defined token's text is made of bytes that have tokens (so that round trips may compare
/// decode(encode(s)) with s minus the dropped bytes).
inline bool specials_keep_all_bytes(const models::Tokenizer& tok) {
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id) {
    const auto type = tok.token_type(id);
    if (type != models::TokenType::kControl && type != models::TokenType::kUserDefined) continue;
    const std::string piece = tok.token_to_piece(id);
    if (without_dropped_bytes(tok, piece) != piece) return false;
  }
  return true;
}

/// encode() then decode() gives the text back (minus dropped bytes); every id is in range; control tokens appear only when
/// parse_special is set (or as the BOS that add_special prepends); the streaming decoder's pieces add up to decode().
inline void check_round_trip(const models::Tokenizer& tok, std::string_view text, models::EncodeOptions options,
                             bool compare_text) {
  const auto ids = tok.encode(text, options);
  std::size_t first = 0;
  if (options.add_special && tok.add_bos() && tok.bos_id()) {
    SPECDEC_FUZZ_CHECK(!ids.empty() && ids[0] == *tok.bos_id());
    first = 1;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    SPECDEC_FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok.vocab_size());
    if (i >= first && !options.parse_special) SPECDEC_FUZZ_CHECK(tok.token_type(ids[i]) != models::TokenType::kControl);
  }
  const std::span<const std::int32_t> body(ids.data() + first, ids.size() - first);
  const std::string decoded = tok.decode(body);
  if (compare_text) SPECDEC_FUZZ_CHECK(decoded == without_dropped_bytes(tok, text));
  models::StreamingDecoder stream(tok);
  std::string streamed;
  for (auto id : body) streamed += stream.push(id);
  streamed += stream.flush();
  SPECDEC_FUZZ_CHECK(streamed == decoded);
}

}  // namespace specdec::fuzz
