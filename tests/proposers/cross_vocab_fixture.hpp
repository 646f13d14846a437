// A synthetic pair of vocabularies for CrossVocabDraftProposer's tests: the target's tokens are the texts "w0" ..
// "w<Vt-1>", the draft's the first `shared` of those followed by `extra` texts of its own ("z0" ...), and the draft's
// tokenizer writes a target token of its own as two of its extra tokens (a fixed expansion), so re-tokenizing the
// target's context changes its length as real tokenizers do (and string-level drafts can write a target token of its
// own from two draft tokens).
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
  /// The inverse for string-level exact match: draft ids to the target ids of the same text. A pair of extra tokens
  /// that writes no target token, or a lone trailing one, ends the text that can be written (as an incomplete UTF-8
  /// character does for real tokenizers).
  specdec::proposers::ToTarget to_target() const {
    const std::int64_t s = shared, e = extra, vt = target_vocab;
    return [s, e, vt](std::span<const std::int64_t> ids) {
      std::vector<std::int64_t> out;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < s) {
          out.push_back(ids[i]);
          continue;
        }
        if (i + 1 == ids.size() || ids[i + 1] < s) break;
        const std::int64_t t = (ids[i + 1] - s) * e + (ids[i] - s);
        if (t < s || t >= vt) break;
        out.push_back(t);
        ++i;
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
