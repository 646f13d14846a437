// specdec-logits-tool: the C++ side of scripts/oracle-logits.sh (llama.cpp's logits against specdec's).
//
//   specdec-logits-tool MODEL.gguf OUT_DIR < IDS.txt
//
// Each line of IDS.txt holds a prompt's token ids (space-separated); for line i, OUT_DIR/logits_i.f32 gets the float32
// logits [T, V] of every position: the first half of the prompt in one forward, the rest one token per forward (both
// the multi-token and the single-token paths). SPECDEC_ACTIVATION_BITS and SPECDEC_KV_CACHE (f16, f32) set LlamaOptions;
// SPECDEC_TIME_PHASES=1 prints the single-token forwards' time per step (LlamaModel::phase_times) on stderr.
#include <ATen/ATen.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/models/llama.hpp"
#include "specdec/torch/rows.hpp"

namespace sm = specdec::models;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " MODEL.gguf OUT_DIR < IDS.txt\n";
    return 2;
  }
  try {
    const std::filesystem::path out = argv[2];
    std::filesystem::create_directories(out);
    sm::LlamaOptions options;
    if (const char* bits = std::getenv("SPECDEC_ACTIVATION_BITS")) options.activation_bits = sm::ActivationBits::parse(bits);
    if (const char* kv = std::getenv("SPECDEC_KV_CACHE")) options.kv_cache_half = sm::parse_kv_cache_type(kv);
    options.time_phases = std::getenv("SPECDEC_TIME_PHASES") != nullptr;
    sm::LlamaModel model = sm::load_llama_gguf(argv[1], options);
    std::string line;
    for (int index = 0; std::getline(std::cin, line); ++index) {
      std::istringstream in(line);
      std::vector<std::int64_t> ids;
      for (std::int64_t id; in >> id;) ids.push_back(id);
      if (ids.empty()) {
        std::cerr << "specdec-logits-tool: line " << index + 1 << " holds no token ids\n";
        return 1;
      }
      const std::int64_t slot = model.allocate_sequence(), half = std::max<std::int64_t>(1, static_cast<std::int64_t>(ids.size()) / 2);
      std::vector<at::Tensor> rows = {specdec::torch::tensor_of(model.forward(sm::make_chain_batch(slot, {ids.begin(), ids.begin() + half})).logits)};
      for (std::size_t t = static_cast<std::size_t>(half); t < ids.size(); ++t)
        rows.push_back(specdec::torch::tensor_of(model.forward(sm::make_chain_batch(slot, {ids[t]})).logits));
      const at::Tensor logits = at::cat(rows).contiguous();
      model.free_sequence(slot);
      std::ofstream f(out / ("logits_" + std::to_string(index) + ".f32"), std::ios::binary);
      f.write(reinterpret_cast<const char*>(logits.data_ptr<float>()), static_cast<std::streamsize>(logits.numel() * 4));
      if (!f) {
        std::cerr << "specdec-logits-tool: writing " << (out / ("logits_" + std::to_string(index) + ".f32")) << " failed\n";
        return 1;
      }
    }
    if (options.time_phases) {
      const auto& ph = model.phase_times();
      std::cerr << "specdec-logits-tool: " << ph.forwards << " timed forwards, ms per forward:";
      for (int i = 0; i < sm::ForwardPhaseTimes::kCount; ++i)
        std::cerr << " " << sm::ForwardPhaseTimes::kNames[i] << " " << 1e3 * ph.seconds[i] / std::max<std::int64_t>(ph.forwards, 1);
      std::cerr << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "specdec-logits-tool: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
