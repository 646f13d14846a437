// safetensors reader and writer, and HF config.json tests (files written by the tests).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "specdec/models/llama_config.hpp"
#include "specdec/models/safetensors.hpp"

namespace sm = specdec::models;

namespace {

std::vector<std::byte> make_file(const std::string& header, const std::vector<std::byte>& data) {
  std::vector<std::byte> out(8);
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class F>
std::string error_of_call(F&& f) {
  try {
    f();
  } catch (const specdec::error& e) {
    return e.what();
  }
  return "(no error)";
}
std::string error_of(const std::vector<std::byte>& b) {
  return error_of_call([&] { (void)sm::SafetensorsFile::from_bytes(b); });
}
#define EXPECT_ERROR_HAS(s, needle) EXPECT_NE((s).find(needle), std::string::npos) << (s)

std::filesystem::path temp_file(const std::string& name, const std::string& content) {
  const auto p = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

}  // namespace

TEST(Safetensors, ReadsDtypesShapesAndMetadata) {
  std::vector<std::byte> data;
  const float f32[] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  const std::uint16_t f16[] = {0x3C00, 0xC000, 0x0001, 0x7C00};  // 1, -2, smallest subnormal, +inf
  const std::uint16_t bf16[] = {0x3F80, 0xC040};                  // 1, -3
  const auto add = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    data.insert(data.end(), b, b + n);
  };
  add(f32, sizeof f32);
  add(f16, sizeof f16);
  add(bf16, sizeof bf16);
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("h":{"dtype":"F16","shape":[4],"data_offsets":[24,32]},)"
                             R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[32,36]}})";
  const auto file = sm::SafetensorsFile::from_bytes(make_file(header, data));
  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  const auto& w = file.tensor("w");
  EXPECT_EQ(w.dtype, sm::SafetensorsDtype::kF32);
  EXPECT_EQ(w.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(file.to_float(w), (std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f}));
  const auto h = file.to_float(file.tensor("h"));
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], 5.9604644775390625e-08f);
  EXPECT_TRUE(std::isinf(h[3]));
  EXPECT_EQ(file.to_float(file.tensor("b")), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_EQ(file.data_offset(), 8 + header.size());
}

TEST(Safetensors, ErrorsNameTheProblem) {
  EXPECT_ERROR_HAS(error_of({}), "expected an 8-byte header length, the file has 0 bytes");
  auto big = make_file("{}", {});
  const std::uint64_t huge = 1ull << 40;
  std::memcpy(big.data(), &huge, 8);
  EXPECT_ERROR_HAS(error_of(big), "header length 1099511627776 exceeds the limit");
  auto trunc = make_file("{}", {});
  const std::uint64_t n = 50;
  std::memcpy(trunc.data(), &n, 8);
  EXPECT_ERROR_HAS(error_of(trunc), "header length 50 but only 2 bytes follow");
  EXPECT_ERROR_HAS(error_of(make_file("{not json", {})), "header is not valid JSON");
  EXPECT_ERROR_HAS(error_of(make_file("[]", {})), "header must be a JSON object, got array");
  EXPECT_ERROR_HAS(error_of(make_file(R"({"x":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", {std::byte{0}})),
                   "tensor 'x' has unsupported dtype 'Q4'");
  EXPECT_ERROR_HAS(error_of(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", std::vector<std::byte>(4))),
                   "tensor 'x' of dtype F32 and shape [2] needs 8 bytes, but data_offsets [0, 4] span 4");
  EXPECT_ERROR_HAS(error_of(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::vector<std::byte>(4))),
                   "tensor 'x' data [0, 8] lies past the end of the data section (4 bytes)");
  EXPECT_ERROR_HAS(error_of(make_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", {})),
                   "shape entries must be non-negative integers");
  EXPECT_ERROR_HAS(
      error_of(make_file(R"({"x":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", {})),
      "overflows the element count");
  EXPECT_ERROR_HAS(error_of(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                                      std::vector<std::byte>(6))),
                   "tensors 'a' [0, 4] and 'b' [2, 6] overlap");
  EXPECT_ERROR_HAS(error_of(make_file(R"({"x":{"dtype":"F32","shape":[1]}})", {})), "needs 'data_offsets' [begin, end]");
  const auto ok = sm::SafetensorsFile::from_bytes(
      make_file(R"({"i":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", std::vector<std::byte>(4)));
  EXPECT_ERROR_HAS(error_of_call([&] { (void)ok.to_float(ok.tensor("i")); }), "has dtype I32, expected F32, F16 or BF16");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)ok.tensor("zz"); }), "safetensors: tensor 'zz' is missing");
  EXPECT_ERROR_HAS(error_of_call([] { sm::SafetensorsFile f("/nonexistent.safetensors"); }), "cannot open");
}

// write_safetensors output read back by the reader: dtypes, shapes, bytes, metadata, the data 8-byte aligned; a byte count
// that does not match the shape is an error naming the tensor, and nothing is written.
TEST(Safetensors, WriterRoundTrip) {
  const std::vector<float> f = {1.5f, -2.f, 3.25f, 0.f, 7.f, -0.5f};
  const std::vector<std::int64_t> ids = {3, -1, 1ll << 40};
  const std::vector<std::byte> flags = {std::byte{1}, std::byte{0}};
  auto bytes = [](const auto& v) { return std::as_bytes(std::span(v)); };
  const std::vector<sm::SafetensorsWriteTensor> ts = {{"a.weight", sm::SafetensorsDtype::kF32, {2, 3}, bytes(f)},
                                                      {"ids", sm::SafetensorsDtype::kI64, {3}, bytes(ids)},
                                                      {"mask", sm::SafetensorsDtype::kBool, {2}, flags}};
  const auto path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_written.safetensors");
  sm::write_safetensors(path, ts, {{"format", "pt"}});
  const sm::SafetensorsFile file(path);
  EXPECT_EQ(file.data_offset() % 8, 0u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  ASSERT_EQ(file.tensors().size(), 3u);
  for (const auto& t : ts) {
    SCOPED_TRACE(t.name);
    const auto& r = file.tensor(t.name);
    EXPECT_EQ(r.dtype, t.dtype);
    EXPECT_EQ(r.shape, t.shape);
    const auto d = file.tensor_data(r);
    ASSERT_EQ(d.size(), t.data.size());
    EXPECT_EQ(std::memcmp(d.data(), t.data.data(), d.size()), 0);
  }
  std::filesystem::remove(path);
  const std::vector<sm::SafetensorsWriteTensor> bad = {{"short", sm::SafetensorsDtype::kF32, {2, 4}, bytes(f)}};
  EXPECT_ERROR_HAS(error_of_call([&] { sm::write_safetensors(path, bad); }), "tensor 'short': expected 32 bytes for its shape, got 24");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(LlamaConfigJson, SmolLM2StyleConfig) {
  // SmolLM2-135M-Instruct's config.json (the fields this loader reads).
  const auto p = temp_file("config.json", R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "bos_token_id": 1, "eos_token_id": 2,
    "hidden_size": 576, "intermediate_size": 1536, "max_position_embeddings": 8192, "num_attention_heads": 9,
    "num_hidden_layers": 30, "num_key_value_heads": 3, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 100000,
    "tie_word_embeddings": true, "vocab_size": 49152, "torch_dtype": "bfloat16"})");
  const auto c = sm::llama_config_from_hf_json(p);
  std::filesystem::remove(p);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.rope_scaling.type, sm::RopeScalingType::kNone);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int32_t>{2}));
}

TEST(LlamaConfigJson, Llama3RopeScalingAndEosList) {
  const auto p = temp_file("config3.json", R"({
    "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "head_dim": 64, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "max_position_embeddings": 131072, "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  const auto c = sm::llama_config_from_hf_json(p);
  std::filesystem::remove(p);
  EXPECT_EQ(c.rope_scaling.type, sm::RopeScalingType::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.head_dim, 64);
}

TEST(LlamaConfigJson, Errors) {
  EXPECT_ERROR_HAS(error_of_call([] { (void)sm::llama_config_from_hf_json("/nonexistent/config.json"); }), "cannot open");
  const auto bad = temp_file("bad.json", "{");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)sm::llama_config_from_hf_json(bad); }), "is not valid JSON");
  std::filesystem::remove(bad);
  const auto missing = temp_file("missing.json", R"({"model_type":"llama","hidden_size":64})");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)sm::llama_config_from_hf_json(missing); }), "is missing key 'vocab_size'");
  std::filesystem::remove(missing);
  const auto gpt = temp_file("gpt.json", R"({"model_type":"gpt2"})");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)sm::llama_config_from_hf_json(gpt); }), "model_type 'gpt2', expected 'llama'");
  std::filesystem::remove(gpt);
  const auto kv = temp_file("kv.json", R"({"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3})");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)sm::llama_config_from_hf_json(kv); }),
                   "num_heads (4) must be a multiple of num_kv_heads (3)");
  std::filesystem::remove(kv);
  const auto yarn = temp_file("yarn.json", R"({"model_type":"llama","vocab_size":10,"hidden_size":64,"intermediate_size":128,
      "num_hidden_layers":1,"num_attention_heads":4,"rope_scaling":{"rope_type":"yarn","factor":4.0}})");
  EXPECT_ERROR_HAS(error_of_call([&] { (void)sm::llama_config_from_hf_json(yarn); }), "rope_scaling type 'yarn' is not supported");
  std::filesystem::remove(yarn);
}

// Found by tests/fuzz/fuzz_safetensors.cpp: a rejected shape entry nested 100k arrays deep was quoted with nlohmann's dump(),
// which recurses once per level and overflowed the stack. The error now describes the value instead.
TEST(Safetensors, DeeplyNestedRejectedValueIsAnError) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string header = R"({"x":{"dtype":"F32","shape":[)" + deep + R"(],"data_offsets":[0,0]}})";
  EXPECT_ERROR_HAS(error_of(make_file(header, {})), "shape entries must be non-negative integers, got an array of 1 values");
  // Entries after an overflowing one are not quoted either.
  const std::string overflow = R"({"x":{"dtype":"U8","shape":[4294967296,4294967296,)" + deep + R"(],"data_offsets":[0,0]}})";
  EXPECT_ERROR_HAS(error_of(make_file(overflow, {})), "shape entry 1 (4294967296) overflows the element count");
}

// Found by tests/fuzz/fuzz_llama_config.cpp: a non-string model_type escaped as nlohmann::json's type_error instead of a
// specdec::error, and a rejected value nested deeply overflowed the stack when quoted.
TEST(LlamaConfigJson, FuzzFindingsAreErrors) {
  const auto error_of_text = [](const std::string& text) {
    return error_of_call([&] { (void)sm::llama_config_from_hf_json_text(text, "fuzz.json"); });
  };
  EXPECT_ERROR_HAS(error_of_text(R"({"model_type":8,"hidden_size":4})"), "'fuzz.json' key 'model_type' must be a string, got 8");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_ERROR_HAS(error_of_text(R"({"vocab_size":)" + deep + "}"), "key 'vocab_size' must be an integer, got an array of 1 values");
}

// Values that do not fit were converted without a check: original_max_position_embeddings = 1e300 (a double outside int64:
// undefined behaviour), and token ids past int32 were truncated into valid-looking ids (4294967298 became 2).
TEST(LlamaConfigJson, OutOfRangeNumbersAreErrors) {
  const std::string base = R"({"vocab_size":10,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4)";
  const auto error_of_text = [](const std::string& text) {
    return error_of_call([&] { (void)sm::llama_config_from_hf_json_text(text); });
  };
  EXPECT_EQ(error_of_text(base + "}"), "(no error)");
  EXPECT_ERROR_HAS(error_of_text(base + R"(,"rope_scaling":{"rope_type":"linear","factor":2,"original_max_position_embeddings":1e300}})"),
                   "original_max_position_embeddings must be a non-negative whole number, got 1e+300");
  EXPECT_ERROR_HAS(error_of_text(base + R"(,"rope_scaling":{"rope_type":"linear","factor":2,"original_max_position_embeddings":-4}})"),
                   "must be a non-negative whole number");
  EXPECT_ERROR_HAS(error_of_text(base + R"(,"eos_token_id":4294967298})"), "eos_token_id 4294967298 is not a valid token id");
  EXPECT_ERROR_HAS(error_of_text(base + R"(,"eos_token_id":[1,4294967298]})"), "eos_token_id 4294967298 is not a valid token id");
  EXPECT_ERROR_HAS(error_of_text(base + R"(,"bos_token_id":-4294967295})"), "bos_token_id -4294967295 is not a valid token id");
  EXPECT_ERROR_HAS(error_of_text(base + R"(,"max_position_embeddings":18446744073709551615})"),
                   "key 'max_position_embeddings' is 18446744073709551615, larger than any integer it can hold");
  const auto c = sm::llama_config_from_hf_json_text(
      base + R"(,"rope_scaling":{"rope_type":"linear","factor":2,"original_max_position_embeddings":4096.0},"eos_token_id":[2,3]})");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int32_t>{2, 3}));
}
