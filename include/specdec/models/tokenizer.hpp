// The two tokenizers of GGUF files, built from their metadata. Torch-free.
//
// Byte-level BPE (GPT-2 style, tokenizer.ggml.model == "gpt2"; SmolLM2, Qwen, Llama 3). Encoding: the text is split at special tokens (when asked), then pre-tokenized into words over Unicode code points, and each
// word's UTF-8 bytes are merged by BPE rank. Pre-tokenizers:
//   kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kSmollm: every \p{N} code point is isolated first (Hugging Face Digits(individual_digits=true); llama.cpp's "smollm" pre
//            type), then kGpt2 runs on the pieces between them. This is SmolLM2's tokenizer.
// Bytes that are not valid UTF-8 count as "other" (neither letter, number nor space), so any byte string encodes and decodes
// back to itself: decode(encode(s)) == s for every s (special tokens only parsed when parse_special is set) -- provided every
// byte of s has a token. A byte the vocabulary lacks (SmolLM2 has no token for 21 bytes: 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D,
// 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF) is dropped, exactly as Hugging Face's BPE without unk_token and llama.cpp do;
// has_byte_token() tells which bytes survive.
//
// SentencePiece (tokenizer.ggml.model == "llama"; Gemma, Llama 2, Mistral), as llama.cpp encodes it. The text is split at
// special tokens (user-defined ones always, control ones with parse_special; longest first, each token over the whole text
// before the next), then each piece between them: a space is prepended when add_space_prefix is set and the piece opens the
// text or follows a special token; every ' ' becomes U+2581 '▁'; the piece is cut into UTF-8 characters (a lead byte's
// length, however malformed what follows), and the adjacent pair whose concatenation is a token of the highest score is merged
// (ties: the leftmost) until no pair forms a token. A piece that is no token is written as its bytes' byte tokens
// (`<0x41>`, or the byte's own one-character token): byte fallback. A byte with neither gives unk (or nothing without one).
// Decoding turns '▁' back into ' ' and byte tokens into their byte; with add_space_prefix set, decode(encode(s)) has the
// space the encoder inserted in front.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

class GgufFile;

/// llama.cpp's token types (tokenizer.ggml.token_type).
enum class TokenType : std::int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      ///< special tokens such as <|im_start|>: matched in text only with parse_special
  kUserDefined = 4,  ///< always matched in text
  kUnused = 5,
  kByte = 6,
};

enum class PreTokenizer : std::uint8_t { kGpt2, kSmollm };

/// Which algorithm the vocabulary belongs to (tokenizer.ggml.model).
enum class TokenizerModel : std::uint8_t {
  kBpe,            ///< "gpt2": byte-level BPE over merges
  kSentencePiece,  ///< "llama": SentencePiece over scores, with byte fallback
};

struct EncodeOptions {
  bool add_special = true;     ///< prepend BOS when the model asks for it (tokenizer.ggml.add_bos_token)
  bool parse_special = false;  ///< match control tokens ("<|im_start|>") in the text instead of encoding their characters
  /// The text continues text already encoded (a draft's words after the context): no space prefix in front of it, even
  /// where add_space_prefix is set (a space after a control token in it still gets one).
  bool continuation = false;
};

/// Everything a tokenizer is built from (what the GGUF metadata holds).
struct TokenizerSpec {
  std::vector<std::string> tokens;    ///< vocabulary: byte-level form for BPE ("Ġthe"), '▁' for spaces for SentencePiece
  std::vector<TokenType> token_types; ///< empty = all kNormal
  std::vector<std::string> merges;    ///< BPE: "Ġ t" = merge "Ġ" and "t"; earlier = higher priority
  PreTokenizer pre_tokenizer = PreTokenizer::kSmollm;  ///< BPE only
  std::optional<std::int32_t> bos_id, eos_id, eot_id, unk_id, pad_id;
  bool add_bos = false;
  TokenizerModel model = TokenizerModel::kBpe;
  std::vector<float> scores;          ///< SentencePiece: one per token (higher merges first); empty = all 0
  bool add_space_prefix = false;      ///< SentencePiece: ' ' before the text and after each special token
  bool add_eos = false;               ///< append EOS when encoding with add_special (tokenizer.ggml.add_eos_token)
};

class Tokenizer {
 public:
  /// Reads tokenizer.ggml.* from a GGUF file: "gpt2" (BPE) or "llama" (SentencePiece; its defaults where a key is absent
  /// are llama.cpp's: add_bos and add_space_prefix on, bos 1, eos 2, unk 0, and an eot found by its text such as
  /// <end_of_turn>). Throws specdec::error for another model, an unknown pre-tokenizer, or inconsistent arrays.
  static Tokenizer from_gguf(const GgufFile& file);
  explicit Tokenizer(TokenizerSpec spec);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<std::int32_t> encode(std::string_view text, EncodeOptions options = {}) const;
  /// Concatenated bytes of the tokens (possibly invalid UTF-8 when cut mid-character). Control tokens give their text unless
  /// skip_special; SentencePiece's unused and undefined tokens give nothing, as in llama.cpp. Throws for an id outside
  /// [0, vocab_size).
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const;
  /// Raw bytes of one token.
  std::string token_to_piece(std::int32_t id) const;

  std::int32_t vocab_size() const noexcept;
  /// Whether `byte` has a single-byte token (BPE drops bytes without one; SentencePiece writes unk for them).
  bool has_byte_token(unsigned char byte) const noexcept;
  /// The vocabulary string as stored (byte-level form).
  const std::string& token_text(std::int32_t id) const;
  std::optional<std::int32_t> token_id(std::string_view token_text) const;
  TokenType token_type(std::int32_t id) const;
  PreTokenizer pre_tokenizer() const noexcept;
  TokenizerModel model() const noexcept;
  /// SentencePiece: whether encode() puts a space in front of the text (and after each special token).
  bool add_space_prefix() const noexcept;

  std::optional<std::int32_t> bos_id() const noexcept;
  std::optional<std::int32_t> eos_id() const noexcept;
  std::optional<std::int32_t> eot_id() const noexcept;
  std::optional<std::int32_t> unk_id() const noexcept;
  std::optional<std::int32_t> pad_id() const noexcept;
  bool add_bos() const noexcept;
  /// End of generation: eos or eot.
  bool is_end_of_generation(std::int32_t id) const noexcept;
  /// Every id that is_end_of_generation accepts, ascending (a request's stop tokens).
  std::vector<std::int32_t> end_of_generation_ids() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Turns a stream of token ids into text, emitting only complete UTF-8 sequences; bytes that can never complete a sequence are
/// emitted as they are, so the concatenation of every push() and the final flush() equals decode(all ids).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  std::string push(std::int32_t id);
  /// Emits whatever is pending (an incomplete sequence at the end of the stream).
  std::string flush();
  void reset() { pending_.clear(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

namespace detail {
enum class UnicodeKind : std::uint8_t { kOther, kLetter, kNumber };
/// Unicode general category L* -> kLetter, N* -> kNumber (generated table, src/models/io/unicode_categories.cpp).
UnicodeKind unicode_kind(char32_t cp) noexcept;
/// Unicode White_Space property (what \s matches).
bool is_unicode_space(char32_t cp) noexcept;
/// Splits `text` into the pre-tokenizer's words (views into text); their concatenation is text.
std::vector<std::string_view> pre_tokenize(std::string_view text, PreTokenizer kind);
/// Length of the longest prefix of `bytes` that ends on a complete sequence boundary, treating bytes that can never start or
/// continue a valid sequence as complete. Used by StreamingDecoder.
std::size_t utf8_complete_prefix(std::string_view bytes) noexcept;
}  // namespace detail

}  // namespace specdec::models
