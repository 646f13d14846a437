// specdec-dump-logits: the C++ side of scripts/validate-model.sh.
//
//   specdec-dump-logits MODEL.gguf PROMPTS.txt OUT_DIR [GREEDY_TOKENS=32]
//
// For prompt i (one per line of PROMPTS.txt; the two characters "\n" stand for a newline; special tokens are parsed):
//   OUT_DIR/ids_i.txt     the prompt's token ids (space-separated)
//   OUT_DIR/logits_i.f32  float32 logits [T, V] under teacher forcing (the first half of the prompt in one forward, the rest
//                         one token per forward, so both the multi-token and the single-token path are covered)
//   OUT_DIR/greedy_i.txt  GREEDY_TOKENS greedy continuation ids (not stopped at end-of-generation)
#include <ATen/ATen.h>

#include <cstdio>
#include <exception>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "specdec/models/gguf.hpp"
#include "specdec/models/llama.hpp"
#include "specdec/models/tokenizer.hpp"
#include "specdec/torch/rows.hpp"

namespace sm = specdec::models;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " MODEL.gguf PROMPTS.txt OUT_DIR [GREEDY_TOKENS=32]\n";
    return 2;
  }
  try {
    const std::filesystem::path model_path = argv[1], out = argv[3];
    const int greedy = argc > 4 ? std::stoi(argv[4]) : 32;
    std::filesystem::create_directories(out);
    // SPECDEC_ACTIVATION_BITS=8 checks the one-plane (llama.cpp-like) activations instead of the default 16.
    sm::LlamaOptions options;
    if (const char* bits = std::getenv("SPECDEC_ACTIVATION_BITS")) options.activation_bits = specdec::models::ActivationBits::parse(bits);
    // SPECDEC_KV_CACHE=f32 checks the float32 KV cache instead of the default float16.
    if (const char* kv = std::getenv("SPECDEC_KV_CACHE")) options.kv_cache_half = sm::parse_kv_cache_type(kv);
    sm::LlamaModel model = sm::load_llama_gguf(model_path, options);
    const sm::Tokenizer tok = sm::Tokenizer::from_gguf(sm::GgufFile(model_path));
    std::ifstream in(argv[2]);
    std::string line;
    int index = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::string text;
      for (std::size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
          text += '\n';
          ++i;
        } else {
          text += line[i];
        }
      }
      sm::EncodeOptions opts;
      opts.parse_special = true;
      const std::vector<std::int32_t> ids32 = tok.encode(text, opts);
      const std::vector<std::int64_t> ids(ids32.begin(), ids32.end());
      const auto T = static_cast<std::int64_t>(ids.size());
      const std::int64_t slot = model.allocate_sequence();
      const std::int64_t first = std::max<std::int64_t>(T / 2, 1);
      std::vector<at::Tensor> rows = {specdec::torch::tensor_of(model.forward(sm::make_chain_batch(slot, {ids.begin(), ids.begin() + first})).logits)};
      for (std::int64_t t = first; t < T; ++t) rows.push_back(specdec::torch::tensor_of(model.forward(sm::make_chain_batch(slot, {ids[t]})).logits));
      at::Tensor logits = at::cat(rows, 0).contiguous();
      std::ofstream(out / ("ids_" + std::to_string(index) + ".txt")) << [&] {
        std::string s;
        for (auto id : ids) s += std::to_string(id) + " ";
        return s;
      }() << "\n";
      std::ofstream(out / ("logits_" + std::to_string(index) + ".f32"), std::ios::binary)
          .write(reinterpret_cast<const char*>(logits.data_ptr<float>()), static_cast<std::streamsize>(logits.numel() * 4));
      std::ofstream g(out / ("greedy_" + std::to_string(index) + ".txt"));
      std::int64_t next = logits[T - 1].argmax().item<std::int64_t>();
      for (int i = 0; i < greedy; ++i) {
        g << next << " ";
        next = specdec::torch::tensor_of(model.forward(sm::make_chain_batch(slot, {next})).logits)[0].argmax().item<std::int64_t>();
      }
      g << "\n";
      model.free_sequence(slot);
      std::cout << "prompt " << index << ": " << T << " tokens\n";
      ++index;
    }
  } catch (const std::exception& e) {
    std::cerr << "specdec-dump-logits: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
