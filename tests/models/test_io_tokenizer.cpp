// Tokenizer, pre-tokenizer, streaming decoder and chat template tests: a synthetic byte-level vocabulary (always available) and
// the real SmolLM2 tokenizer (skipped when the model has not been downloaded).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "specdec/models/chat_template.hpp"
#include "specdec/models/gguf.hpp"
#include "specdec/models/tokenizer.hpp"

namespace sm = specdec::models;
using sm::detail::pre_tokenize;
using sm::detail::UnicodeKind;

namespace {

template <class F>
std::string error_of_call(F&& f) {
  try {
    f();
  } catch (const specdec::error& e) {
    return e.what();
  }
  return "(no error)";
}
#define EXPECT_ERROR_HAS(s, needle) EXPECT_NE((s).find(needle), std::string::npos) << (s)

std::string utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

/// GPT-2's bytes_to_unicode, written out again for the tests.
std::string byte_level(const std::string& raw) {
  std::string out;
  for (unsigned char b : raw) {
    const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    if (direct) {
      out += utf8(b);
    } else {
      int n = 0;
      for (int x = 0; x < b; ++x)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++n;
      out += utf8(static_cast<char32_t>(256 + n));
    }
  }
  return out;
}

/// 256 byte tokens, then merged tokens, then two control tokens.
sm::Tokenizer synthetic(const std::vector<std::pair<std::string, std::string>>& merges) {
  sm::TokenizerSpec s;
  for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_level(std::string(1, static_cast<char>(b))));
  for (const auto& [l, r] : merges) {
    const std::string t = byte_level(l + r);
    if (std::find(s.tokens.begin(), s.tokens.end(), t) == s.tokens.end()) s.tokens.push_back(t);
    s.merges.push_back(byte_level(l) + " " + byte_level(r));
  }
  s.token_types.assign(s.tokens.size(), sm::TokenType::kNormal);
  for (const char* special : {"<|im_start|>", "<|im_end|>"}) {
    s.tokens.push_back(special);
    s.token_types.push_back(sm::TokenType::kControl);
  }
  s.eos_id = static_cast<std::int32_t>(s.tokens.size() - 1);
  s.bos_id = static_cast<std::int32_t>(s.tokens.size() - 2);
  return sm::Tokenizer(std::move(s));
}

std::vector<std::string> pieces(const sm::Tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(t.token_to_piece(id));
  return out;
}

std::filesystem::path model_path() {
  if (const char* p = std::getenv("SPECDEC_GGUF")) return p;
  return std::filesystem::path(SPECDEC_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------------------------
// Unicode classes and the pre-tokenizer

TEST(Unicode, CategoriesAndSpaces) {
  EXPECT_EQ(sm::detail::unicode_kind(U'a'), UnicodeKind::kLetter);
  EXPECT_EQ(sm::detail::unicode_kind(U'Z'), UnicodeKind::kLetter);
  EXPECT_EQ(sm::detail::unicode_kind(U'é'), UnicodeKind::kLetter);
  EXPECT_EQ(sm::detail::unicode_kind(U'中'), UnicodeKind::kLetter);
  EXPECT_EQ(sm::detail::unicode_kind(U'ʰ'), UnicodeKind::kLetter);  // Lm
  EXPECT_EQ(sm::detail::unicode_kind(U'7'), UnicodeKind::kNumber);
  EXPECT_EQ(sm::detail::unicode_kind(U'٣'), UnicodeKind::kNumber);   // Nd
  EXPECT_EQ(sm::detail::unicode_kind(U'Ⅻ'), UnicodeKind::kNumber);   // Nl
  EXPECT_EQ(sm::detail::unicode_kind(U'½'), UnicodeKind::kNumber);   // No
  EXPECT_EQ(sm::detail::unicode_kind(U' '), UnicodeKind::kOther);
  EXPECT_EQ(sm::detail::unicode_kind(U'!'), UnicodeKind::kOther);
  EXPECT_EQ(sm::detail::unicode_kind(U'\u0301'), UnicodeKind::kOther);  // Mn
  EXPECT_EQ(sm::detail::unicode_kind(U'🙂'), UnicodeKind::kOther);
  EXPECT_EQ(sm::detail::unicode_kind(0x10FFFF), UnicodeKind::kOther);
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00A0', U'\u2003', U'\u3000'})
    EXPECT_TRUE(sm::detail::is_unicode_space(c)) << static_cast<std::uint32_t>(c);
  for (char32_t c : {U'a', U'\u200B', U'_', U'0'}) EXPECT_FALSE(sm::detail::is_unicode_space(c));
}

TEST(PreTokenizer, Gpt2AndSmollmSplits) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(pre_tokenize("Hello world  123 it's\n\nx", sm::PreTokenizer::kGpt2),
            (V{"Hello", " world", " ", " 123", " it", "'s", "\n", "\n", "x"}));
  EXPECT_EQ(pre_tokenize("Hello world  123 it's\n\nx", sm::PreTokenizer::kSmollm),
            (V{"Hello", " world", "  ", "1", "2", "3", " it", "'s", "\n", "\n", "x"}));
  EXPECT_EQ(pre_tokenize("a   b", sm::PreTokenizer::kGpt2), (V{"a", "  ", " b"}));
  EXPECT_EQ(pre_tokenize("trailing  ", sm::PreTokenizer::kGpt2), (V{"trailing", "  "}));
  EXPECT_EQ(pre_tokenize(" ?!x", sm::PreTokenizer::kGpt2), (V{" ?!", "x"}));
  EXPECT_EQ(pre_tokenize("I'M we'll 'S", sm::PreTokenizer::kGpt2), (V{"I", "'", "M", " we", "'ll", " '", "S"}));
  EXPECT_EQ(pre_tokenize("x\xff\xfe y", sm::PreTokenizer::kGpt2), (V{"x", "\xff\xfe", " y"}));  // invalid bytes are "other"
  EXPECT_EQ(pre_tokenize("", sm::PreTokenizer::kSmollm), V{});
  // Pieces always concatenate back to the input.
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? " \n'1"[rng() % 4] : rng() & 0xFF);
    std::string joined;
    for (auto p : pre_tokenize(s, sm::PreTokenizer::kSmollm)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, s);
  }
}

// ------------------------------------------------------------------------------------------------------------------------------
// BPE on a synthetic vocabulary

TEST(TokenizerSynthetic, MergeOrderFollowsRank) {
  const auto ab_first = synthetic({{"a", "b"}, {"b", "c"}});
  EXPECT_EQ(pieces(ab_first, ab_first.encode("abc")), (std::vector<std::string>{"ab", "c"}));
  const auto bc_first = synthetic({{"b", "c"}, {"a", "b"}});
  EXPECT_EQ(pieces(bc_first, bc_first.encode("abc")), (std::vector<std::string>{"a", "bc"}));
  const auto aa = synthetic({{"a", "a"}, {"aa", "aa"}});
  EXPECT_EQ(pieces(aa, aa.encode("aaaaa")), (std::vector<std::string>{"aaaa", "a"}));
  EXPECT_EQ(pieces(aa, aa.encode("aaa")), (std::vector<std::string>{"aa", "a"}));  // leftmost pair first
  const auto sp = synthetic({{" ", "w"}, {" w", "o"}});
  EXPECT_EQ(pieces(sp, sp.encode("a wo")), (std::vector<std::string>{"a", " wo"}));
}

TEST(TokenizerSynthetic, ArbitraryBytesAndUtf8RoundTrip) {
  const auto tok = synthetic({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"\xC3", "\xA9"}});
  std::mt19937 rng(42);
  for (int i = 0; i < 1000; ++i) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
    ASSERT_EQ(tok.decode(tok.encode(s)), s) << i;
  }
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 30);
    for (int k = 0; k < n; ++k) {
      char32_t cp = static_cast<char32_t>(rng() % 0x110000);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = U'x';
      s += rng() % 3 == 0 ? std::string(" the") : utf8(cp);
    }
    ASSERT_EQ(tok.decode(tok.encode(s)), s) << i;
  }
}

TEST(TokenizerSynthetic, SpecialTokensOnlyWhenAsked) {
  const auto tok = synthetic({});
  const std::int32_t start = *tok.token_id("<|im_start|>");
  const std::int32_t end = *tok.token_id("<|im_end|>");
  const std::string text = "x<|im_start|>y<|im_end|>";
  const auto plain = tok.encode(text);
  EXPECT_EQ(plain.size(), text.size());  // every byte its own token: the markers are encoded as text
  EXPECT_EQ(tok.decode(plain), text);
  const auto special = tok.encode(text, {.parse_special = true});
  ASSERT_EQ(special.size(), 4u);
  EXPECT_EQ(special[1], start);
  EXPECT_EQ(special[3], end);
  EXPECT_EQ(tok.decode(special), text);
  EXPECT_EQ(tok.decode(special, /*skip_special=*/true), "xy");
  EXPECT_EQ(tok.token_type(start), sm::TokenType::kControl);
  EXPECT_TRUE(tok.is_end_of_generation(end));
  EXPECT_FALSE(tok.is_end_of_generation(start));
  std::vector<std::int32_t> ends;  // every id the predicate accepts, ascending
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.is_end_of_generation(id)) ends.push_back(id);
  EXPECT_EQ(tok.end_of_generation_ids(), ends);
  EXPECT_FALSE(ends.empty());
  const std::vector<std::int32_t> bad{0, tok.vocab_size()};
  EXPECT_ERROR_HAS(error_of_call([&] { (void)tok.decode(bad); }), "token id 258");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)tok.decode(bad); }), "is outside [0, 258)");
}

TEST(TokenizerSynthetic, SpecErrors) {
  EXPECT_ERROR_HAS(error_of_call([] { sm::Tokenizer t(sm::TokenizerSpec{}); }), "the vocabulary is empty");
  sm::TokenizerSpec s;
  s.tokens = {"a", "b"};
  s.token_types = {sm::TokenType::kNormal};
  EXPECT_ERROR_HAS(error_of_call([&] { sm::Tokenizer t(s); }), "1 token types for 2 tokens");
  s.token_types.clear();
  s.eos_id = 5;
  EXPECT_ERROR_HAS(error_of_call([&] { sm::Tokenizer t(s); }), "eos id 5 is outside [0, 2)");
  s.eos_id.reset();
  s.merges = {"ab"};
  EXPECT_ERROR_HAS(error_of_call([&] { sm::Tokenizer t(s); }), "merge 0 'ab' is not of the form 'left right'");
}

// ------------------------------------------------------------------------------------------------------------------------------
// SentencePiece on a synthetic vocabulary (the expected ids follow llama.cpp's llm_tokenizer_spm by hand)

namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // '▁'

/// <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF> (ids 3..258), then `normal` with their scores, then `extra`.
struct SpmVocab {
  std::vector<std::pair<std::string, float>> normal;
  std::vector<std::pair<std::string, sm::TokenType>> extra;
  bool add_space_prefix = false;
  bool with_bytes = true;

  sm::TokenizerSpec spec() const {
    sm::TokenizerSpec s;
    s.model = sm::TokenizerModel::kSentencePiece;
    const auto add = [&](std::string t, sm::TokenType type, float score) {
      s.tokens.push_back(std::move(t));
      s.token_types.push_back(type);
      s.scores.push_back(score);
    };
    add("<unk>", sm::TokenType::kUnknown, 0);
    add("<s>", sm::TokenType::kControl, 0);
    add("</s>", sm::TokenType::kControl, 0);
    if (with_bytes) {
      for (int b = 0; b < 256; ++b) add(fmt_byte(b), sm::TokenType::kByte, 0);
    }
    for (const auto& [t, score] : normal) add(t, sm::TokenType::kNormal, score);
    for (const auto& [t, type] : extra) add(t, type, 0);
    s.unk_id = 0;
    s.bos_id = 1;
    s.eos_id = 2;
    s.add_bos = true;
    s.add_space_prefix = add_space_prefix;
    return s;
  }
  static std::string fmt_byte(int b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    return std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
  }
};

std::string sp(const std::string& s) {  // ' ' -> '▁'
  std::string out;
  for (char c : s) out += c == ' ' ? std::string(kSpace) : std::string(1, c);
  return out;
}

std::vector<std::string> texts(const sm::Tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(t.token_text(id));
  return out;
}

}  // namespace

TEST(SentencePieceSynthetic, HighestScoreMergesFirstThenLeftmost) {
  SpmVocab v;
  v.normal = {{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}};
  const sm::Tokenizer bc_first(v.spec());
  EXPECT_EQ(bc_first.model(), sm::TokenizerModel::kSentencePiece);
  EXPECT_EQ(texts(bc_first, bc_first.encode("abc", {.add_special = false})), (std::vector<std::string>{"a", "bc"}));
  v.normal = {{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -3}};
  const sm::Tokenizer ab_first(v.spec());
  EXPECT_EQ(texts(ab_first, ab_first.encode("abc", {.add_special = false})), (std::vector<std::string>{"ab", "c"}));
  v.normal = {{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -2}};
  const sm::Tokenizer tie(v.spec());  // equal scores: the leftmost pair
  EXPECT_EQ(texts(tie, tie.encode("abc", {.add_special = false})), (std::vector<std::string>{"ab", "c"}));
  v.normal = {{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}, {"abc", -9}};
  const sm::Tokenizer whole(v.spec());  // a + bc, then a + bc forms a token of its own, whatever its score
  EXPECT_EQ(texts(whole, whole.encode("abc", {.add_special = false})), (std::vector<std::string>{"abc"}));
  v.normal = {{"a", -1}, {"aa", -1}};
  const sm::Tokenizer aa(v.spec());
  EXPECT_EQ(texts(aa, aa.encode("aaa", {.add_special = false})), (std::vector<std::string>{"aa", "a"}));
  // BOS only with add_special (add_bos is set); EOS too where the vocabulary asks for it.
  EXPECT_EQ(texts(aa, aa.encode("a")), (std::vector<std::string>{"<s>", "a"}));
  auto with_eos = v.spec();
  with_eos.add_eos = true;
  const sm::Tokenizer eos(std::move(with_eos));
  EXPECT_EQ(texts(eos, eos.encode("a")), (std::vector<std::string>{"<s>", "a", "</s>"}));
  EXPECT_EQ(texts(eos, eos.encode("a", {.add_special = false})), (std::vector<std::string>{"a"}));
}

TEST(SentencePieceSynthetic, SpacesBecomeU2581AndThePrefixSpace) {
  SpmVocab v;
  v.normal = {{kSpace, -1}, {"a", -1}, {"b", -1}, {sp(" a"), -3}, {"ab", -2}, {sp(" ab"), -5}};
  const sm::Tokenizer plain(v.spec());
  EXPECT_FALSE(plain.add_space_prefix());
  EXPECT_EQ(texts(plain, plain.encode("ab ab", {.add_special = false})),
            (std::vector<std::string>{"ab", sp(" ab")}));  // "ab" first, then "▁" + "ab" is a token
  EXPECT_EQ(plain.decode(plain.encode("ab ab", {.add_special = false})), "ab ab");
  v.add_space_prefix = true;
  const sm::Tokenizer prefixed(v.spec());
  EXPECT_TRUE(prefixed.add_space_prefix());
  EXPECT_EQ(texts(prefixed, prefixed.encode("ab  a", {.add_special = false})),
            (std::vector<std::string>{sp(" ab"), kSpace, sp(" a")}));
  EXPECT_EQ(prefixed.decode(prefixed.encode("ab  a", {.add_special = false})), " ab  a");  // the inserted space stays
  EXPECT_EQ(prefixed.encode("", {.add_special = false}), (std::vector<std::int32_t>{}));
  EXPECT_EQ(texts(prefixed, prefixed.encode("")), (std::vector<std::string>{"<s>"}));
  // Text that continues earlier text (a draft's words after the context) gets no prefix space.
  EXPECT_EQ(texts(prefixed, prefixed.encode("ab a", {.add_special = false, .continuation = true})),
            (std::vector<std::string>{"ab", sp(" a")}));
  EXPECT_EQ(texts(plain, plain.encode("ab a", {.add_special = false, .continuation = true})),
            texts(plain, plain.encode("ab a", {.add_special = false})));
}

TEST(SentencePieceSynthetic, ByteFallbackAndItsDecoding) {
  SpmVocab v;
  v.normal = {{"a", -1}, {"\xC3\xA9", -1}, {kSpace, -1}};  // 'é' is a token, 'ü' (C3 BC) and U+1F642 are not
  const sm::Tokenizer tok(v.spec());
  const auto ids = tok.encode("a\xC3\xBC\xC3\xA9\xF0\x9F\x99\x82", {.add_special = false});
  EXPECT_EQ(texts(tok, ids), (std::vector<std::string>{"a", "<0xC3>", "<0xBC>", "\xC3\xA9", "<0xF0>", "<0x9F>", "<0x99>",
                                                       "<0x82>"}));
  EXPECT_EQ(tok.decode(ids), "a\xC3\xBC\xC3\xA9\xF0\x9F\x99\x82");
  EXPECT_EQ(tok.token_to_piece(3 + 0x41), "A");
  // Malformed UTF-8: a lead byte takes its length's worth of bytes as one character; the pieces fall back to bytes. (A
  // space decodes back only because '▁' is a token: without one it would fall back to the bytes of '▁'.)
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) {
      c = static_cast<char>(rng() % 3 == 0 ? 'a' : rng() & 0xFF);
      if (c == ' ') c = 'b';  // see below
    }
    ASSERT_EQ(tok.decode(tok.encode(s, {.add_special = false})), s) << i;
  }
  // A lead byte whose character swallows the first byte of an escaped space: the space comes back as the bytes of '▁'
  // (llama.cpp does the same; only malformed text meets this).
  EXPECT_EQ(texts(tok, tok.encode("\xE5" "a b", {.add_special = false})),
            (std::vector<std::string>{"<0xE5>", "<0x61>", "<0xE2>", "<0x96>", "<0x81>", "<0x62>"}));
  // Without byte tokens a byte falls back to its one-character token, else to unk.
  SpmVocab nb;
  nb.with_bytes = false;
  nb.normal = {{"a", -1}, {"x", -1}};
  const sm::Tokenizer no_bytes(nb.spec());
  EXPECT_TRUE(no_bytes.has_byte_token('a'));
  EXPECT_FALSE(no_bytes.has_byte_token(0xC3));
  EXPECT_EQ(texts(no_bytes, no_bytes.encode("a\xC3\xBCx", {.add_special = false})),
            (std::vector<std::string>{"a", "<unk>", "<unk>", "x"}));
}

TEST(SentencePieceSynthetic, SpecialTokensLongestFirstOverTheWholeText) {
  SpmVocab v;
  v.normal = {{"p", -1}, {"q", -1}, {"r", -1}, {"s", -1}, {kSpace, -1}};
  v.extra = {{"pq", sm::TokenType::kUserDefined}, {"qrs", sm::TokenType::kUserDefined},
             {"<turn>", sm::TokenType::kControl}, {"<dead>", sm::TokenType::kUnused}};
  v.add_space_prefix = true;
  const sm::Tokenizer tok(v.spec());
  // llama.cpp splits the text at the longest special token everywhere before it tries a shorter one: "qrs" wins over the
  // leftmost match "pq".
  EXPECT_EQ(texts(tok, tok.encode("pqrs", {.add_special = false})), (std::vector<std::string>{kSpace, "p", "qrs"}));
  EXPECT_EQ(texts(tok, tok.encode("pqpq", {.add_special = false})), (std::vector<std::string>{"pq", "pq"}));  // no text
  // Control tokens only with parse_special; a space goes in front of the text after each special token.
  EXPECT_EQ(texts(tok, tok.encode("p<turn>s", {.add_special = false, .parse_special = true})),
            (std::vector<std::string>{kSpace, "p", "<turn>", kSpace, "s"}));
  const auto literal = tok.encode("<turn>", {.add_special = false});
  EXPECT_EQ(tok.decode(literal), " <turn>");
  EXPECT_NE(std::find(literal.begin(), literal.end(), 3 + '<'), literal.end());  // '<' as its byte token
  // Decoding: control tokens give their text unless skipped; unused tokens give nothing, as in llama.cpp.
  const std::int32_t turn = *tok.token_id("<turn>");
  const std::int32_t dead = *tok.token_id("<dead>");
  const std::vector<std::int32_t> ids{turn, *tok.token_id("p"), dead};
  EXPECT_EQ(tok.decode(ids), "<turn>p");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "p");
}

TEST(SentencePieceSynthetic, SpecErrors) {
  SpmVocab v;
  v.normal = {{"a", -1}};
  auto s = v.spec();
  s.scores.pop_back();
  EXPECT_ERROR_HAS(error_of_call([&] { sm::Tokenizer t(s); }), "259 scores for 260 tokens");
  s = v.spec();
  s.merges = {"a b"};
  EXPECT_ERROR_HAS(error_of_call([&] { sm::Tokenizer t(s); }), "a SentencePiece vocabulary has no merges");
  s = v.spec();
  s.tokens[3] = "<0xZZ>";
  EXPECT_ERROR_HAS(error_of_call([&] { sm::Tokenizer t(s); }), "byte token 3 is '<0xZZ>', expected the form <0xHH>");
  sm::TokenizerSpec bpe;
  bpe.tokens = {"a"};
  bpe.scores = {0.0f};
  EXPECT_ERROR_HAS(error_of_call([&] { sm::Tokenizer t(bpe); }), "belong to SentencePiece, not BPE");
}

TEST(StreamingDecoder, EmitsOnlyCompleteSequences) {
  const auto tok = synthetic({});
  sm::StreamingDecoder dec(tok);
  const std::string text = "é🙂a\xff\xe2\x82\xac\xe2\x82" "b";  // ends with a cut sequence followed by 'b'
  std::vector<std::string> outs;
  for (unsigned char c : text) outs.push_back(dec.push(tok.encode(std::string(1, static_cast<char>(c)))[0]));
  outs.push_back(dec.flush());
  std::string joined;
  for (const auto& o : outs) joined += o;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(outs[0], "");      // first byte of é
  EXPECT_EQ(outs[1], "é");
  EXPECT_EQ(outs[2], "");
  EXPECT_EQ(outs[5], "🙂");
  EXPECT_EQ(outs[6], "a");
  EXPECT_EQ(outs[7], "\xff");  // never valid: emitted at once
  EXPECT_EQ(outs[10], "€");
  EXPECT_EQ(outs[12], "");     // \xe2\x82 then 'b': the cut sequence is given up
  EXPECT_EQ(outs[13], "\xe2\x82" "b");
  EXPECT_EQ(sm::detail::utf8_complete_prefix("ab\xf0\x9f"), 2u);
  EXPECT_EQ(sm::detail::utf8_complete_prefix("ab\xed\xa0"), 4u);  // a surrogate prefix can never complete
  EXPECT_EQ(sm::detail::utf8_complete_prefix("\xc0"), 1u);        // overlong lead byte
  // Random token streams: the concatenation always equals decode().
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    std::vector<std::int32_t> ids(rng() % 20);
    for (auto& id : ids) id = static_cast<std::int32_t>(rng() % 256);
    sm::StreamingDecoder d(tok);
    std::string s;
    for (auto id : ids) s += d.push(id);
    s += d.flush();
    ASSERT_EQ(s, tok.decode(ids));
  }
}

// ------------------------------------------------------------------------------------------------------------------------------
// Chat template

TEST(ChatTemplate, ChatMLWithDefaultSystemPrompt) {
  const std::vector<sm::ChatMessage> user_only{{"user", "Hi there"}};
  EXPECT_EQ(sm::apply_chat_template(user_only, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<sm::ChatMessage> with_system{{"system", "Be brief."}, {"user", "2+2?"}, {"assistant", "4"}};
  EXPECT_EQ(sm::apply_chat_template(with_system, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n");
  EXPECT_EQ(sm::apply_chat_template({}, true), "<|im_start|>assistant\n");
  EXPECT_EQ(sm::ChatTemplate("").apply(user_only, false), "<|im_start|>user\nHi there<|im_end|>\n");
}

TEST(ChatTemplate, GemmaTurnsSystemMergedAndTrimmed) {
  const auto g = sm::ChatTemplate::gemma();
  EXPECT_EQ(g.kind(), sm::ChatTemplateKind::kGemma);
  const std::vector<sm::ChatMessage> user_only{{"user", "  Hi there\n"}};
  EXPECT_EQ(g.apply(user_only, true), "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(g.apply(user_only, false), "<start_of_turn>user\nHi there<end_of_turn>\n");
  // The system message goes in front of the first user turn, after a blank line; "assistant" is "model".
  const std::vector<sm::ChatMessage> chat{{"system", " Be brief. "}, {"user", "2+2?"}, {"assistant", "4\n"}, {"user", "3+3?"}};
  EXPECT_EQ(g.apply(chat, true),
            "<start_of_turn>user\nBe brief.\n\n2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n"
            "<start_of_turn>user\n3+3?<end_of_turn>\n<start_of_turn>model\n");
  // A system message waits for a turn that is not the model's.
  const std::vector<sm::ChatMessage> late{{"assistant", "Hello."}, {"system", "S"}, {"assistant", "x"}, {"user", "u"}};
  EXPECT_EQ(g.apply(late, false),
            "<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>model\nx<end_of_turn>\n"
            "<start_of_turn>user\nS\n\nu<end_of_turn>\n");
  EXPECT_EQ(g.apply({}, true), "<start_of_turn>model\n");
  // Recognised from the template text; anything else named in the error.
  EXPECT_EQ(sm::ChatTemplate::from_template_text("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}"
                                                 "{% endfor %}").kind(),
            sm::ChatTemplateKind::kGemma);
  const auto chatml = sm::ChatTemplate::from_template_text("<|im_start|>system\nYou are X.<|im_end|>{% ... %}<|im_start|>");
  EXPECT_EQ(chatml.kind(), sm::ChatTemplateKind::kChatML);
  EXPECT_EQ(chatml.default_system_prompt(), "You are X.");
  EXPECT_ERROR_HAS(error_of_call([] { (void)sm::ChatTemplate::from_template_text("[INST] {{ m }} [/INST]"); }),
                   "is neither ChatML (expected <|im_start|> and <|im_end|>) nor Gemma's (expected <start_of_turn>), got "
                   "'[INST] {{ m }} [/INST]'");
}

// ------------------------------------------------------------------------------------------------------------------------------
// The real SmolLM2 tokenizer

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    file_ = new sm::GgufFile(model_path());
    tok_ = new sm::Tokenizer(sm::Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
    tok_ = nullptr;
    file_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << model_path() << " is absent (scripts/setup.sh downloads it)";
  }
  static inline sm::GgufFile* file_ = nullptr;
  static inline sm::Tokenizer* tok_ = nullptr;
};

TEST_F(SmolLM2Tokenizer, MetadataAndIds) {
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->pre_tokenizer(), sm::PreTokenizer::kSmollm);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->unk_id(), 0);
  EXPECT_EQ(tok_->pad_id(), 2);
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_EQ(tok_->token_text(1), "<|im_start|>");
  EXPECT_EQ(tok_->token_type(1), sm::TokenType::kControl);
  EXPECT_EQ(tok_->token_to_piece(19556), "Hello");
  EXPECT_EQ(tok_->token_text(905), "Ġworld");
  EXPECT_EQ(tok_->token_to_piece(905), " world");
  EXPECT_FALSE(tok_->has_byte_token(0xFF));
  EXPECT_TRUE(tok_->has_byte_token('a'));
}

TEST_F(SmolLM2Tokenizer, KnownEncodings) {
  // Expected ids from the independent implementation (Hugging Face `tokenizers` configured as SmolLM2's tokenizer.json over this
  // GGUF's vocabulary and merges; scripts/validate_tokenizer.py --print-examples).
  const std::vector<std::pair<std::string, std::vector<std::int32_t>>> cases = {
      {"", {}},
      {" ", {216}},
      {"  ", {256}},
      {"\n", {198}},
      {"Hello world", {19556, 905}},
      {"Hello, world!", {19556, 28, 905, 17}},
      {" leading space", {2899, 1898}},
      {"trailing space ", {4861, 4966, 1898, 216}},
      {"12345", {33, 34, 35, 36, 37}},
      {"3.14", {35, 30, 33, 36}},
      {"it's", {269, 506}},
      {"I'm here", {57, 5248, 1535}},
      {"a  b   c", {81, 216, 278, 256, 265}},
      {"tabs\tand\nnewlines\r\n", {100, 7366, 197, 397, 198, 2241, 5110, 2738}},
      {"naïve café", {3546, 46494, 37366}},
      {"日本語のテキスト", {23274, 115, 40993, 179, 120, 248, 26453, 11100, 224, 10391, 251, 10391, 134, 11100, 226}},
      {"🙂👍🏽", {10813, 38887, 10813, 235, 231, 10813, 233, 138}},
      {"   \n\n  x", {333, 8866, 1792}},
      {"x\n\n\ny", {104, 1116, 198, 105}},
      {"1\u00a02", {33, 15442, 34}},
      {"\u3000a", {12109, 218, 81}},
      {"a\u2003b", {81, 321, 221, 82}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(tok_->encode(text), ids) << text;
    EXPECT_EQ(tok_->decode(ids), text);
  }
  EXPECT_EQ(tok_->encode("<|im_start|>user\nHi<|im_end|>\n", {.parse_special = true}),
            (std::vector<std::int32_t>{1, 4093, 198, 26843, 2, 198}));
  const auto literal = tok_->encode("<|im_start|>");
  EXPECT_GT(literal.size(), 1u);  // without parse_special the marker is ordinary text
  EXPECT_EQ(tok_->decode(literal), "<|im_start|>");
}

TEST_F(SmolLM2Tokenizer, RoundTripsRepresentableText) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int i = 0; i < 400; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) {
      const int kind = static_cast<int>(rng() % 4);
      char32_t cp = kind == 0 ? 0x20 + rng() % 95 : kind == 1 ? 0xA0 + rng() % 0x3000 : kind == 2 ? 0x4E00 + rng() % 0x5000
                                                                                                    : 0x1F300 + rng() % 0x300;
      s += utf8(cp);
    }
    // Raw bytes too, as long as the vocabulary has a token for each.
    for (int k = static_cast<int>(rng() % 4); k > 0; --k) {
      const auto b = static_cast<unsigned char>(rng() & 0xFF);
      if (tok_->has_byte_token(b)) s += static_cast<char>(b);
    }
    ASSERT_EQ(tok_->decode(tok_->encode(s)), s) << i;
    ++checked;
  }
  EXPECT_EQ(checked, 400);
}

TEST_F(SmolLM2Tokenizer, ChatTemplateFromMetadata) {
  const auto tmpl = sm::ChatTemplate::from_gguf(*file_);
  EXPECT_EQ(tmpl.default_system_prompt(), sm::ChatTemplate::kSmolLM2SystemPrompt);
  const std::vector<sm::ChatMessage> msgs{{"user", "What is 2+2?"}};
  const std::string prompt = tmpl.apply(msgs, true);
  const auto ids = tok_->encode(prompt, {.parse_special = true});
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ(ids.front(), 1);                     // <|im_start|>
  const auto last_start = std::find(ids.rbegin(), ids.rend(), 1).base();  // just after the last <|im_start|>
  EXPECT_EQ(tok_->decode(std::vector<std::int32_t>(last_start, ids.end())), "assistant\n");
  EXPECT_EQ(tok_->decode(ids), prompt);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);  // two <|im_end|>
}

TEST_F(SmolLM2Tokenizer, EncodesLongTextQuickly) {
  std::string text;
  std::mt19937 rng(5);
  const char* words[] = {"speculative ", "decoding ", "draft ", "target ", "tokens ", "12345 ", "\n", "naïve ", "日本 ", "🙂 "};
  while (text.size() < 400000) text += words[rng() % 10];
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok_->encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tok_->decode(ids), text);
  EXPECT_LT(s, 5.0) << "encoding 400 KB took " << s << " s";
  RecordProperty("encode_mb_per_s", std::to_string(text.size() / s / 1e6));
  // One long word without any split point (worst case for BPE) stays fast too.
  const std::string word(20000, 'a');
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(tok_->decode(tok_->encode(word)), word);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 2.0);
}

// ------------------------------------------------------------------------------------------------------------------------------
// The real Gemma 3 tokenizer (SentencePiece, 262,144 tokens; skipped when scripts/fetch-gemma.sh has not fetched it). The
// expected ids are llama.cpp's (llama-cpp-python 0.3.36, llama_tokenize on the same file); scripts/oracle-tokenizer.sh
// compares whole corpora.

namespace {
std::filesystem::path gemma_path() {
  if (const char* p = std::getenv("SPECDEC_GEMMA_GGUF")) return p;
  return std::filesystem::path(SPECDEC_SOURCE_DIR) / "models" / "gemma-3-270m-q4_k_m.gguf";
}
}  // namespace

class Gemma3Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(gemma_path())) return;
    file_ = new sm::GgufFile(gemma_path());
    tok_ = new sm::Tokenizer(sm::Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
    tok_ = nullptr;
    file_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << gemma_path() << " is absent (scripts/fetch-gemma.sh downloads it)";
  }
  static inline sm::GgufFile* file_ = nullptr;
  static inline sm::Tokenizer* tok_ = nullptr;
};

TEST_F(Gemma3Tokenizer, MetadataAndIds) {
  const auto& t = *tok_;
  EXPECT_EQ(t.model(), sm::TokenizerModel::kSentencePiece);
  EXPECT_EQ(t.vocab_size(), 262144);
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.eot_id(), 106);  // <end_of_turn>, found by its text as llama.cpp does
  EXPECT_EQ(t.unk_id(), 3);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_space_prefix());
  EXPECT_EQ(t.end_of_generation_ids(), (std::vector<std::int32_t>{1, 106}));
  EXPECT_EQ(t.token_text(105), "<start_of_turn>");
  EXPECT_EQ(t.token_type(107), sm::TokenType::kUserDefined);  // "\n"
  for (int b = 0; b < 256; ++b) EXPECT_TRUE(t.has_byte_token(static_cast<unsigned char>(b))) << b;
}

TEST_F(Gemma3Tokenizer, EncodingsEqualLlamaCpp) {
  const auto& t = *tok_;
  const auto plain = [&](const std::string& s) { return t.encode(s, {.add_special = false}); };
  using V = std::vector<std::int32_t>;
  EXPECT_EQ(plain("Hello world"), (V{9259, 1902}));
  EXPECT_EQ(plain(" leading  spaces\n\n\nand tabs\t\tend "), (V{5830, 138, 35220, 109, 624, 42364, 255969, 643, 236743}));
  EXPECT_EQ(plain("na\u00efve caf\u00e9 \u65e5\u672c\u8a9e \U0001F642 \uFDFD"),
            (V{1789, 238527, 560, 33443, 33375, 238582, 57235, 236743, 253375}));
  EXPECT_EQ(plain("<start_of_turn>user"), (V{236820, 3041, 236779, 1340, 236779, 887, 236813, 2364}));
  EXPECT_EQ(plain("def f(x):\n    return x * 2\n"), (V{2063, 517, 236769, 236781, 1473, 107, 140, 2060, 1123, 808, 236743,
                                                         236778, 107}));
  EXPECT_EQ(plain("1234567 + 3.14159 = ?"), (V{236770, 236778, 236800, 236812, 236810, 236825, 236832, 900, 236743, 236800,
                                              236761, 236770, 236812, 236770, 236810, 236819, 578, 2360}));
  EXPECT_EQ(plain(std::string("\x00\x01\x7f", 3)), (V{238, 249732, 251541}));
  // User-defined tokens split the text always ("<sub>", "</sub>"); "</s>" too is user-defined in the file, but llama.cpp
  // makes it a control token by its text: matched only with parse_special.
  EXPECT_EQ(plain("x<sub>2</sub>"), (V{236781, 204, 236778, 213}));
  EXPECT_EQ(t.token_type(212), sm::TokenType::kControl);
  EXPECT_EQ(plain("a </s> b"), (V{236746, 1454, 236751, 236813, 518}));
  EXPECT_EQ(t.encode("a </s> b", {.add_special = false, .parse_special = true}), (V{236746, 236743, 212, 518}));
  // The chat prompt Gemma's template writes, with BOS and control tokens parsed.
  const std::vector<sm::ChatMessage> msgs{{"user", "Hi"}};
  const auto prompt = sm::ChatTemplate::from_gguf(*file_).apply(msgs, true);
  EXPECT_EQ(t.encode(prompt, {.add_special = true, .parse_special = true}),
            (V{2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107}));
  EXPECT_EQ(t.decode(t.encode(prompt, {.add_special = false, .parse_special = true})), prompt);
}
