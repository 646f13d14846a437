// Byte-level BPE and SentencePiece tokenizers: see include/specdec/models/tokenizer.hpp.
#include "specdec/models/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <mutex>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "specdec/models/gguf.hpp"

namespace specdec::models {

namespace {

[[noreturn]] void fail(const std::string& msg) { throw specdec::error(msg); }

constexpr char32_t kInvalidByte = 0xFFFFFFFFu;

/// Decodes one UTF-8 sequence (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). Returns its length, or 0 if the bytes at
/// p do not start a valid complete sequence.
std::size_t decode_utf8(const unsigned char* p, std::size_t n, char32_t& cp) {
  const unsigned char c = p[0];
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  std::size_t len;
  char32_t v;
  char32_t min;
  if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (n < len) return 0;
  for (std::size_t i = 1; i < len; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (p[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  cp = v;
  return len;
}

/// GPT-2's byte <-> printable code point table (bytes_to_unicode).
struct ByteLevelTable {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<std::int16_t, 512> cp_to_byte{};  // -1 where a code point stands for no byte (all of them are below 512)
  ByteLevelTable() {
    std::array<bool, 256> direct{};
    for (int b = 33; b <= 126; ++b) direct[b] = true;
    for (int b = 161; b <= 172; ++b) direct[b] = true;
    for (int b = 174; b <= 255; ++b) direct[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) byte_to_cp[b] = direct[b] ? static_cast<char32_t>(b) : next++;
    cp_to_byte.fill(-1);
    for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_cp[b]] = static_cast<std::int16_t>(b);
  }
};
const ByteLevelTable& byte_level() {
  static const ByteLevelTable t;
  return t;
}

struct CodePoint {
  char32_t cp;
  std::uint32_t offset;  // byte offset in the text
  detail::UnicodeKind kind;
  bool space;
};

std::vector<CodePoint> to_code_points(std::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    std::size_t len = decode_utf8(p + i, text.size() - i, cp);
    if (len == 0) {
      out.push_back({kInvalidByte, static_cast<std::uint32_t>(i), detail::UnicodeKind::kOther, false});
      i += 1;
      continue;
    }
    out.push_back({cp, static_cast<std::uint32_t>(i), detail::unicode_kind(cp), detail::is_unicode_space(cp)});
    i += len;
  }
  return out;
}

/// GPT-2 pattern on cps[b, e): returns the end of the match starting at i (always > i).
std::size_t gpt2_match(const std::vector<CodePoint>& c, std::size_t i, std::size_t e) {
  using K = detail::UnicodeKind;
  const auto letter = [&](std::size_t k) { return k < e && c[k].kind == K::kLetter; };
  const auto number = [&](std::size_t k) { return k < e && c[k].kind == K::kNumber; };
  const auto other = [&](std::size_t k) { return k < e && c[k].kind == K::kOther && !c[k].space; };
  const auto space = [&](std::size_t k) { return k < e && c[k].space; };
  // 's|'t|'re|'ve|'m|'ll|'d
  if (c[i].cp == U'\'' && i + 1 < e) {
    const char32_t c1 = c[i + 1].cp;
    if (c1 == U's' || c1 == U't' || c1 == U'm' || c1 == U'd') return i + 2;
    if (i + 2 < e) {
      const char32_t c2 = c[i + 2].cp;
      if ((c1 == U'r' && c2 == U'e') || (c1 == U'v' && c2 == U'e') || (c1 == U'l' && c2 == U'l')) return i + 3;
    }
  }
  const std::size_t s = c[i].cp == U' ' ? i + 1 : i;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
  if (letter(s)) {
    std::size_t k = s;
    while (letter(k)) ++k;
    return k;
  }
  if (number(s)) {
    std::size_t k = s;
    while (number(k)) ++k;
    return k;
  }
  if (other(s)) {
    std::size_t k = s;
    while (other(k)) ++k;
    return k;
  }
  // '\s+(?!\S)|\s+'
  std::size_t k = i;
  while (space(k)) ++k;
  if (k == i) return i + 1;  // unreachable: every code point is letter, number, other or space
  if (k == e) return k;
  if (k - i >= 2) return k - 1;
  return k;
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------------------------
// detail

bool detail::is_unicode_space(char32_t cp) noexcept {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::vector<std::string_view> detail::pre_tokenize(std::string_view text, PreTokenizer kind) {
  std::vector<std::string_view> words;
  if (text.empty()) return words;
  const auto cps = to_code_points(text);
  const auto offset = [&](std::size_t k) { return k < cps.size() ? cps[k].offset : static_cast<std::uint32_t>(text.size()); };
  const auto run = [&](std::size_t b, std::size_t e) {
    std::size_t i = b;
    while (i < e) {
      const std::size_t j = gpt2_match(cps, i, e);
      words.push_back(text.substr(offset(i), offset(j) - offset(i)));
      i = j;
    }
  };
  if (kind == PreTokenizer::kGpt2) {
    run(0, cps.size());
    return words;
  }
  // kSmollm: isolate every number code point, then GPT-2 on the pieces between.
  std::size_t b = 0;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (cps[i].kind == UnicodeKind::kNumber) {
      run(b, i);
      words.push_back(text.substr(offset(i), offset(i + 1) - offset(i)));
      b = i + 1;
    }
  }
  run(b, cps.size());
  return words;
}

std::size_t detail::utf8_complete_prefix(std::string_view bytes) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    char32_t cp;
    const std::size_t len = decode_utf8(p + i, n - i, cp);
    if (len > 0) {
      i += len;
      continue;
    }
    // Invalid here: is it a valid but incomplete prefix running to the end of the buffer?
    const unsigned char c = p[i];
    std::size_t need = 0;
    if ((c & 0xE0) == 0xC0 && c >= 0xC2) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0 && c <= 0xF4) need = 4;
    if (need > 0 && n - i < need) {
      bool prefix_ok = true;
      for (std::size_t k = i + 1; k < n; ++k) {
        if ((p[k] & 0xC0) != 0x80) prefix_ok = false;
      }
      // Reject prefixes that already rule out a valid sequence (overlong or surrogate or > U+10FFFF).
      if (prefix_ok && n - i >= 2) {
        const unsigned char c1 = p[i + 1];
        if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
          prefix_ok = false;
      }
      if (prefix_ok) return i;  // wait for more bytes
    }
    i += 1;  // a byte that can never become valid: emit it as it is
  }
  return n;
}

// ------------------------------------------------------------------------------------------------------------------------------
// Tokenizer

struct Tokenizer::Impl {
  TokenizerSpec spec;
  std::vector<std::string> bytes;  // raw bytes of each token
  // Looked up by string_view (no copy of the key).
  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::int32_t, TextHash, std::equal_to<>> text_to_id;
  std::array<std::int32_t, 256> byte_token{};
  struct Merge {
    std::int32_t rank;
    std::int32_t id;
  };
  std::unordered_map<std::uint64_t, Merge> merges;
  std::vector<std::int32_t> specials_parse;   // control + user-defined, longest first
  std::vector<std::int32_t> specials_always;  // user-defined, longest first
  // SentencePiece: control, user-defined and unknown tokens in llama.cpp's order (std::sort by length, longest first, over
  // ascending ids: the same library sort on the same input gives the same order among tokens of equal length).
  std::vector<std::int32_t> specials_spm;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache;
  static constexpr std::size_t kCacheLimit = 1 << 16;

  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  void bpe(std::string_view word, std::vector<std::int32_t>& out) const;
  void bpe_uncached(std::string_view word, std::vector<std::int32_t>& out) const;
  void spm_encode(std::string_view text, EncodeOptions options, std::vector<std::int32_t>& out) const;
  void spm_piece(std::string_view escaped, std::vector<std::int32_t>& out) const;
  std::optional<std::int32_t> find(std::string_view text) const {
    const auto it = text_to_id.find(text);
    if (it == text_to_id.end()) return std::nullopt;
    return it->second;
  }
};

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer::Tokenizer(TokenizerSpec spec) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  const std::size_t n = spec.tokens.size();
  if (n == 0) fail("tokenizer: the vocabulary is empty");
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    fail(fmt::format("tokenizer: vocabulary of {} tokens exceeds int32", n));
  if (spec.token_types.empty()) spec.token_types.assign(n, TokenType::kNormal);
  if (spec.token_types.size() != n)
    fail(fmt::format("tokenizer: {} token types for {} tokens, expected one per token", spec.token_types.size(), n));
  const auto check_id = [&](const char* what, const std::optional<std::int32_t>& id) {
    if (id && (*id < 0 || static_cast<std::size_t>(*id) >= n))
      fail(fmt::format("tokenizer: {} id {} is outside [0, {})", what, *id, n));
  };
  check_id("bos", spec.bos_id);
  check_id("eos", spec.eos_id);
  check_id("eot", spec.eot_id);
  check_id("unk", spec.unk_id);
  check_id("pad", spec.pad_id);

  if (spec.model == TokenizerModel::kSentencePiece) {
    if (spec.scores.empty()) spec.scores.assign(n, 0.0f);
    if (spec.scores.size() != n)
      fail(fmt::format("tokenizer: {} scores for {} tokens, expected one per token", spec.scores.size(), n));
    if (!spec.merges.empty()) fail("tokenizer: a SentencePiece vocabulary has no merges");
  } else if (!spec.scores.empty() || spec.add_space_prefix) {
    fail("tokenizer: scores and add_space_prefix belong to SentencePiece, not BPE");
  }
  const auto& bl = byte_level();
  m.byte_token.fill(-1);
  if (spec.model == TokenizerModel::kSentencePiece) {
    m.bytes.resize(n);
    m.text_to_id.reserve(n * 2);
    for (std::size_t id = 0; id < n; ++id) {
      const std::string& t = spec.tokens[id];
      if (!t.empty()) m.text_to_id.emplace(t, static_cast<std::int32_t>(id));  // first occurrence wins on duplicates
      const TokenType type = spec.token_types[id];
      switch (type) {
        case TokenType::kNormal: {  // '▁' stands for a space
          std::string& b = m.bytes[id];
          for (std::size_t i = 0; i < t.size();) {
            if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
              b += ' ';
              i += 3;
            } else {
              b += t[i++];
            }
          }
          break;
        }
        case TokenType::kByte: {  // "<0xHH>"
          const auto hex = [](char c) -> int {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'A' && c <= 'F') return c - 'A' + 10;
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            return -1;
          };
          if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>' || hex(t[3]) < 0 || hex(t[4]) < 0)
            fail(fmt::format("tokenizer: byte token {} is '{}', expected the form <0xHH>", id, t));
          m.bytes[id] = std::string(1, static_cast<char>(hex(t[3]) * 16 + hex(t[4])));
          break;
        }
        case TokenType::kControl:
        case TokenType::kUserDefined:
        case TokenType::kUnknown:
          m.bytes[id] = t;
          if (!t.empty()) m.specials_spm.push_back(static_cast<std::int32_t>(id));
          break;
        case TokenType::kUnused:
        case TokenType::kUndefined:
          break;  // decoded as nothing, as llama.cpp does
      }
    }
    // llama.cpp's order: std::sort (not stable) of the ascending ids by length, longest first.
    std::sort(m.specials_spm.begin(), m.specials_spm.end(),
              [&](std::int32_t a, std::int32_t b) { return spec.tokens[a].size() > spec.tokens[b].size(); });
    // A byte's token: "<0xHH>" (any type), else the byte as a one-character token.
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      auto id = m.find(std::string_view(name, 6));
      if (!id) id = m.find(std::string(1, static_cast<char>(b)));
      if (id) m.byte_token[static_cast<std::size_t>(b)] = *id;
    }
    m.spec = std::move(spec);
    return;
  }
  m.bytes.resize(n);
  m.text_to_id.reserve(n * 2);
  for (std::size_t id = 0; id < n; ++id) {
    const std::string& t = spec.tokens[id];
    m.text_to_id.emplace(t, static_cast<std::int32_t>(id));  // first occurrence wins on duplicates
    const TokenType type = spec.token_types[id];
    if (type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown) {
      m.bytes[id] = t;
      if (!t.empty() && type != TokenType::kUnknown) {
        m.specials_parse.push_back(static_cast<std::int32_t>(id));
        if (type == TokenType::kUserDefined) m.specials_always.push_back(static_cast<std::int32_t>(id));
      }
      continue;
    }
    // Byte-level form -> raw bytes; a token with a code point outside the table keeps its text.
    std::string raw;
    bool ok = true;
    const auto* p = reinterpret_cast<const unsigned char*>(t.data());
    for (std::size_t i = 0; i < t.size() && ok;) {
      char32_t cp;
      const std::size_t len = decode_utf8(p + i, t.size() - i, cp);
      if (len == 0) {
        ok = false;
        break;
      }
      const int byte = cp < bl.cp_to_byte.size() ? bl.cp_to_byte[cp] : -1;
      if (byte < 0) ok = false;
      else raw += static_cast<char>(byte);
      i += len;
    }
    m.bytes[id] = ok ? raw : t;
    if (ok && raw.size() == 1) {
      const auto b = static_cast<unsigned char>(raw[0]);
      if (m.byte_token[b] < 0) m.byte_token[b] = static_cast<std::int32_t>(id);
    }
  }
  const auto by_length = [&](std::int32_t a, std::int32_t b) {
    return m.bytes[a].size() != m.bytes[b].size() ? m.bytes[a].size() > m.bytes[b].size() : a < b;
  };
  std::sort(m.specials_parse.begin(), m.specials_parse.end(), by_length);
  std::sort(m.specials_always.begin(), m.specials_always.end(), by_length);

  m.merges.reserve(spec.merges.size() * 2);
  std::string joined;
  for (std::size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string_view line = spec.merges[r];
    const std::size_t sp = line.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= line.size())
      fail(fmt::format("tokenizer: merge {} '{}' is not of the form 'left right'", r, line));
    const std::string_view left = line.substr(0, sp), right = line.substr(sp + 1);
    joined.assign(left).append(right);
    const auto l = m.text_to_id.find(left), rr = m.text_to_id.find(right), mm = m.text_to_id.find(std::string_view(joined));
    if (l == m.text_to_id.end() || rr == m.text_to_id.end() || mm == m.text_to_id.end()) continue;  // unreachable merge
    m.merges.emplace(Impl::key(l->second, rr->second), Impl::Merge{static_cast<std::int32_t>(r), mm->second});
  }
  m.spec = std::move(spec);
}

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  const std::string& model = f.get_string("tokenizer.ggml.model");
  TokenizerSpec s;
  if (model == "llama") {
    s.model = TokenizerModel::kSentencePiece;
  } else if (model != "gpt2") {
    fail(fmt::format("tokenizer: tokenizer.ggml.model is '{}', expected 'gpt2' (byte-level BPE) or 'llama' (SentencePiece)",
                     model));
  }
  const bool spm = s.model == TokenizerModel::kSentencePiece;
  const std::string pre = f.contains("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : std::string("default");
  if (spm) {
    // llama.cpp runs SentencePiece the same whatever tokenizer.ggml.pre says.
  } else if (pre == "smollm") {
    s.pre_tokenizer = PreTokenizer::kSmollm;
  } else if (pre == "gpt-2" || pre == "gpt2" || pre == "default") {
    s.pre_tokenizer = PreTokenizer::kGpt2;
  } else {
    fail(fmt::format("tokenizer: tokenizer.ggml.pre '{}' is not supported (expected smollm, gpt-2 or default)", pre));
  }
  s.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.contains("tokenizer.ggml.token_type")) {
    const auto types = f.get_integer_array("tokenizer.ggml.token_type");
    s.token_types.reserve(types.size());
    for (auto t : types) {
      if (t < 0 || t > 6) fail(fmt::format("tokenizer: token type {} is outside 0..6", t));
      s.token_types.push_back(static_cast<TokenType>(t));
    }
  }
  // llama.cpp turns tokens it recognises by their text (end of generation, end of turn, fill-in-the-middle markers) into
  // control tokens whatever the file says: Gemma's user-defined "</s>" is then parsed only with parse_special. (Where a
  // vocabulary has several end-of-turn or FIM candidates of one kind and names none, llama.cpp takes one of them in its
  // hash map's order; all of them are taken here.)
  static constexpr std::string_view kControlByText[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
      "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "<end_of_utterance>", "<|eom_id|>", "<|return|>", "<|call|>", "<|flush|>",
      "<|calls|>", "</s>", "[EOS]", "<eos>", "<turn|>", "<|tool_response>", "[e~[", "<|fim_prefix|>", "<fim-prefix>",
      "<fim_prefix>", "<\uFF5Cfim\u2581begin\uFF5C>", "<PRE>", "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>",
      "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uFF5Cfim\u2581hole\uFF5C>", "<SUF>", "\u2581<SUF>",
      "<|code_suffix|>", "<|suffix|>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uFF5Cfim\u2581end\uFF5C>",
      "<MID>", "\u2581<MID>", "<|code_middle|>", "<|middle|>", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
      "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};
  if (s.token_types.empty()) s.token_types.assign(s.tokens.size(), TokenType::kNormal);
  static const std::unordered_set<std::string_view> control_by_text(std::begin(kControlByText), std::end(kControlByText));
  if (s.token_types.size() == s.tokens.size()) {
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      if (s.token_types[i] == TokenType::kControl || s.tokens[i].size() > 32) continue;
      if (control_by_text.contains(s.tokens[i])) s.token_types[i] = TokenType::kControl;
    }
  }
  if (spm) {
    if (f.contains("tokenizer.ggml.scores")) {
      const auto scores = f.get_double_array("tokenizer.ggml.scores");
      s.scores.reserve(scores.size());
      for (double v : scores) s.scores.push_back(static_cast<float>(v));
    }
  } else {
    s.merges = f.get_string_array("tokenizer.ggml.merges");
  }
  const auto id = [&](const char* key) -> std::optional<std::int32_t> {
    const auto v = f.get_integer_optional(key);
    if (!v) return std::nullopt;
    if (*v < 0 || *v > std::numeric_limits<std::int32_t>::max())
      fail(fmt::format("tokenizer: {} = {} is not a valid token id", key, *v));
    return static_cast<std::int32_t>(*v);
  };
  s.bos_id = id("tokenizer.ggml.bos_token_id");
  s.eos_id = id("tokenizer.ggml.eos_token_id");
  s.eot_id = id("tokenizer.ggml.eot_token_id");
  s.unk_id = id("tokenizer.ggml.unknown_token_id");
  s.pad_id = id("tokenizer.ggml.padding_token_id");
  const auto flag = [&](const char* key, bool absent) {
    return f.contains(key) ? f.get<bool>(key) : absent;
  };
  s.add_bos = flag("tokenizer.ggml.add_bos_token", spm);
  s.add_eos = flag("tokenizer.ggml.add_eos_token", false);
  if (spm) {
    // llama.cpp's defaults for a SentencePiece vocabulary where the keys are absent (ids outside it are dropped).
    s.add_space_prefix = flag("tokenizer.ggml.add_space_prefix", true);
    const auto in_vocab = [&](std::int32_t v) -> std::optional<std::int32_t> {
      if (static_cast<std::size_t>(v) < s.tokens.size()) return v;
      return std::nullopt;
    };
    if (!s.bos_id) s.bos_id = in_vocab(1);
    if (!s.eos_id) s.eos_id = in_vocab(2);
    if (!s.unk_id) s.unk_id = in_vocab(0);
    // The end-of-turn token found by its text when the file does not name it (llama.cpp does the same).
    if (!s.eot_id) {
      for (std::size_t i = 0; i < s.tokens.size() && !s.eot_id; ++i)
        for (std::string_view t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>"})
          if (s.tokens[i] == t) s.eot_id = static_cast<std::int32_t>(i);
    }
  }
  return Tokenizer(std::move(s));
}

void Tokenizer::Impl::bpe_uncached(std::string_view word, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::int32_t id;
    std::int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (std::size_t i = 0; i < word.size(); ++i) {
    // A byte without a token of its own is dropped, as Hugging Face's BPE (no unk_token) and llama.cpp do; the bytes around it
    // become adjacent and may merge.
    const std::int32_t id = byte_token[static_cast<unsigned char>(word[i])];
    if (id < 0) continue;
    const auto k = static_cast<std::int32_t>(sym.size());
    sym.push_back({id, k - 1, k + 1});
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  struct Cand {
    std::int32_t rank;
    std::int32_t left;
    std::int32_t left_id, right_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> pq;
  const auto push = [&](std::int32_t left) {
    if (left < 0) return;
    const std::int32_t right = sym[left].next;
    if (right < 0) return;
    const auto it = merges.find(key(sym[left].id, sym[right].id));
    if (it != merges.end()) pq.push({it->second.rank, left, sym[left].id, sym[right].id});
  };
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(sym.size()); ++i) push(i);
  while (!pq.empty()) {
    const Cand c = pq.top();
    pq.pop();
    Symbol& l = sym[c.left];
    if (l.id != c.left_id || l.next < 0) continue;  // stale
    Symbol& r = sym[l.next];
    if (r.id != c.right_id) continue;
    const auto it = merges.find(key(l.id, r.id));
    l.id = it->second.id;
    r.id = -1;  // dead
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    push(l.prev);
    push(c.left);
  }
  for (std::int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

void Tokenizer::Impl::bpe(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    bpe_uncached(word, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    const auto it = cache.find(std::string(word));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::int32_t> ids;
  bpe_uncached(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (word.size() <= 256) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() >= kCacheLimit) cache.clear();
    cache.emplace(std::string(word), std::move(ids));
  }
}

void Tokenizer::Impl::spm_piece(std::string_view text, std::vector<std::int32_t>& out) const {
  // llama.cpp's llm_tokenizer_spm_session: symbols are UTF-8 characters (the lead byte's length, cut at the end), merged
  // pairwise by the score of the token they form.
  struct Symbol {
    std::int32_t prev, next;
    std::size_t offset, n;
  };
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  static constexpr std::size_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  for (std::size_t off = 0; off < text.size();) {
    const std::size_t len = std::min(kLength[static_cast<unsigned char>(text[off]) >> 4], text.size() - off);
    const auto k = static_cast<std::int32_t>(sym.size());
    sym.push_back({k - 1, off + len == text.size() ? -1 : k + 1, off, len});
    off += len;
  }
  if (sym.empty()) return;
  struct Bigram {
    std::int32_t left, right;
    float score;
    std::size_t size;
  };
  struct Lower {  // the queue's top: the highest score, then the leftmost
    bool operator()(const Bigram& l, const Bigram& r) const {
      return l.score < r.score || (l.score == r.score && l.left > r.left);
    }
  };
  std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue;
  std::unordered_map<std::string, std::pair<std::int32_t, std::int32_t>> rev_merge;
  const auto try_add = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    std::string pair(text.substr(sym[left].offset, sym[left].n + sym[right].n));
    const auto id = find(pair);
    if (!id) return;
    queue.push({left, right, spec.scores[static_cast<std::size_t>(*id)], pair.size()});
    rev_merge[std::move(pair)] = {left, right};
  };
  for (std::int32_t i = 1; i < static_cast<std::int32_t>(sym.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // one side was merged meanwhile
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  // A symbol that is no token: split back along the merge that made it, or written byte by byte. `depth` bounds the
  // walk (llama.cpp recurses without a bound; a finished symbol is always a token or a single character, so it stops).
  const auto resegment = [&](auto& self, std::size_t offset, std::size_t n, int depth) -> void {
    const std::string_view piece = text.substr(offset, n);
    if (const auto id = find(piece)) {
      out.push_back(*id);
      return;
    }
    if (depth < 64) {
      if (const auto it = rev_merge.find(std::string(piece)); it != rev_merge.end()) {
        const Symbol& a = sym[it->second.first];
        const Symbol& c = sym[it->second.second];
        self(self, a.offset, a.n, depth + 1);
        self(self, c.offset, c.n, depth + 1);
        return;
      }
    }
    for (char ch : piece) {
      const std::int32_t id = byte_token[static_cast<unsigned char>(ch)];
      if (id >= 0) out.push_back(id);
      else if (spec.unk_id) out.push_back(*spec.unk_id);
    }
  };
  for (std::int32_t i = 0; i != -1; i = sym[i].next) resegment(resegment, sym[i].offset, sym[i].n, 0);
}

void Tokenizer::Impl::spm_encode(std::string_view text, EncodeOptions options, std::vector<std::int32_t>& out) const {
  // Fragments: raw text [offset, offset + length) or a special token (length < 0 marks the token, id in offset).
  struct Fragment {
    std::size_t offset;
    std::size_t length;
    std::int32_t token;  // -1: raw text
  };
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({0, text.size(), -1});
  std::vector<Fragment> next;
  for (const std::int32_t id : specials_spm) {
    const TokenType type = spec.token_types[static_cast<std::size_t>(id)];
    if (!options.parse_special && (type == TokenType::kControl || type == TokenType::kUnknown)) continue;
    const std::string& s = spec.tokens[static_cast<std::size_t>(id)];
    next.clear();
    bool split = false;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      std::size_t b = f.offset;
      const std::size_t e = f.offset + f.length;
      for (;;) {
        const std::size_t at = text.substr(0, e).find(s, b);
        if (at == std::string_view::npos) break;
        if (at > b) next.push_back({b, at - b, -1});
        next.push_back({0, 0, id});
        split = true;
        b = at + s.size();
      }
      if (b < e) next.push_back({b, e - b, -1});
    }
    if (split) frags.swap(next);
  }
  bool prev_special = !options.continuation;  // a space goes in front of the first piece too, unless it continues text
  std::string piece;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    piece.clear();
    if (spec.add_space_prefix && prev_special) piece += "\xE2\x96\x81";
    for (char c : text.substr(f.offset, f.length)) {
      if (c == ' ') piece += "\xE2\x96\x81";
      else piece += c;
    }
    spm_piece(piece, out);
    prev_special = false;
  }
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  const auto& m = *impl_;
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_special && m.spec.add_bos && m.spec.bos_id) out.push_back(*m.spec.bos_id);
  if (m.spec.model == TokenizerModel::kSentencePiece) {
    m.spm_encode(text, options, out);
    if (options.add_special && m.spec.add_eos && m.spec.eos_id) out.push_back(*m.spec.eos_id);
    return out;
  }
  const auto& specials = options.parse_special ? m.specials_parse : m.specials_always;
  const auto encode_text = [&](std::string_view piece) {
    for (auto w : detail::pre_tokenize(piece, m.spec.pre_tokenizer)) m.bpe(w, out);
  };
  const auto finish = [&] {
    if (options.add_special && m.spec.add_eos && m.spec.eos_id) out.push_back(*m.spec.eos_id);
  };
  if (specials.empty()) {
    encode_text(text);
    finish();
    return out;
  }
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::int32_t hit = -1;
    for (auto id : specials) {
      const std::string& s = m.bytes[id];
      if (s[0] == text[i] && text.compare(i, s.size(), s) == 0) {
        hit = id;
        break;  // longest first
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    encode_text(text.substr(start, i - start));
    out.push_back(hit);
    i += m.bytes[hit].size();
    start = i;
  }
  encode_text(text.substr(start));
  finish();
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::string out;
  for (auto id : ids) {
    if (token_type(id) == TokenType::kControl && skip_special) continue;  // token_type() also checks the range
    out += impl_->bytes[static_cast<std::size_t>(id)];
  }
  return out;
}

std::string Tokenizer::token_to_piece(std::int32_t id) const {
  (void)token_type(id);  // range check
  return impl_->bytes[static_cast<std::size_t>(id)];
}

bool Tokenizer::has_byte_token(unsigned char byte) const noexcept { return impl_->byte_token[byte] >= 0; }

std::int32_t Tokenizer::vocab_size() const noexcept { return static_cast<std::int32_t>(impl_->bytes.size()); }

const std::string& Tokenizer::token_text(std::int32_t id) const {
  (void)token_type(id);
  return impl_->spec.tokens[static_cast<std::size_t>(id)];
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view text) const {
  const auto it = impl_->text_to_id.find(text);
  if (it == impl_->text_to_id.end()) return std::nullopt;
  return it->second;
}

TokenType Tokenizer::token_type(std::int32_t id) const {
  if (id < 0 || id >= vocab_size()) fail(fmt::format("tokenizer: token id {} is outside [0, {})", id, vocab_size()));
  return impl_->spec.token_types[static_cast<std::size_t>(id)];
}

PreTokenizer Tokenizer::pre_tokenizer() const noexcept { return impl_->spec.pre_tokenizer; }
TokenizerModel Tokenizer::model() const noexcept { return impl_->spec.model; }
bool Tokenizer::add_space_prefix() const noexcept { return impl_->spec.add_space_prefix; }
std::optional<std::int32_t> Tokenizer::bos_id() const noexcept { return impl_->spec.bos_id; }
std::optional<std::int32_t> Tokenizer::eos_id() const noexcept { return impl_->spec.eos_id; }
std::optional<std::int32_t> Tokenizer::eot_id() const noexcept { return impl_->spec.eot_id; }
std::optional<std::int32_t> Tokenizer::unk_id() const noexcept { return impl_->spec.unk_id; }
std::optional<std::int32_t> Tokenizer::pad_id() const noexcept { return impl_->spec.pad_id; }
bool Tokenizer::add_bos() const noexcept { return impl_->spec.add_bos; }
bool Tokenizer::is_end_of_generation(std::int32_t id) const noexcept {
  return (impl_->spec.eos_id && id == *impl_->spec.eos_id) || (impl_->spec.eot_id && id == *impl_->spec.eot_id);
}

std::vector<std::int32_t> Tokenizer::end_of_generation_ids() const {
  std::vector<std::int32_t> ids;
  for (const auto& id : {impl_->spec.eos_id, impl_->spec.eot_id})
    if (id && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// ------------------------------------------------------------------------------------------------------------------------------
// StreamingDecoder

std::string StreamingDecoder::push(std::int32_t id) {
  if (!(skip_special_ && tokenizer_->token_type(id) == TokenType::kControl)) pending_ += tokenizer_->token_to_piece(id);
  const std::size_t n = detail::utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamingDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace specdec::models
