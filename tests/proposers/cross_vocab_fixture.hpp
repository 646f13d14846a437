// A synthetic pair of vocabularies for CrossVocabDraftProposer's tests: the target's tokens are the texts "w0" ..
// "w<Vt-1>", the draft's the first `shared` of those followed by `extra` texts of its own ("z0" ...), and the draft's
// tokenizer writes a target token of its own as two of its extra tokens (a fixed expansion), so re-tokenizing the
// target's context changes its length as real tokenizers do.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/proposers/cross_vocab.hpp"

namespace specdec::test {

struct CrossVocabPair {
  std::int64_t target_vocab, shared, extra;
  std::vector<std::string> target_texts() const {
    std::vector<std::string> out;
    for (std::int64_t t = 0; t < target_vocab; ++t) out.push_back("w" + std::to_string(t));
    return out;
  }
  std::vector<std::string> draft_texts() const {
    std::vector<std::string> out;
    for (std::int64_t t = 0; t < shared; ++t) out.push_back("w" + std::to_string(t));
    for (std::int64_t z = 0; z < extra; ++z) out.push_back("z" + std::to_string(z));
    return out;
  }
  std::int64_t draft_vocab() const { return shared + extra; }
  specdec::proposers::Retokenize retokenize() const {
    const std::int64_t s = shared, e = extra;
    return [s, e](std::span<const std::int64_t> ids) {
      std::vector<std::int64_t> out;
      for (const auto t : ids) {
        if (t < s) {
          out.push_back(t);
        } else {
          out.push_back(s + t % e);
          out.push_back(s + (t / e) % e);
        }
      }
      return out;
    };
  }
  specdec::proposers::VocabBridge bridge() const {
    const auto d = draft_texts(), t = target_texts();
    return specdec::proposers::VocabBridge::from_texts(d, t);
  }
};

}  // namespace specdec::test
