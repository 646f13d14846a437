// specdec::models — the check every holder of a reduced output vocabulary makes (LlamaOptions::output_ids, a
// checkpoint's d2t, DraftModelOptions::output_ids): distinct token ids of the vocabulary. Header-only, standard library.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specdec::models {

/// The index of the first entry of `ids` that is outside [0, vocab) or repeats an earlier one; -1 when every entry is a
/// distinct token of the vocabulary.
inline std::int64_t first_invalid_output_id(std::span<const std::int64_t> ids, std::int64_t vocab) {
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(vocab > 0 ? vocab : 0), 0);
  for (std::size_t j = 0; j < ids.size(); ++j) {
    const std::int64_t t = ids[j];
    if (t < 0 || t >= vocab || seen[static_cast<std::size_t>(t)]++) return static_cast<std::int64_t>(j);
  }
  return -1;
}

}  // namespace specdec::models
