// specdec::train — Training data from the target: self-distilled answers with stored features and top-k distributions, and the EAGLE-3 fused features.
#pragma once

#include "specdec/train/records.hpp"
#include "specdec/train/corpus.hpp"

namespace specdec::train {

// --- data generation -------------------------------------------------------------------------------------------------------

struct DataOptions {
  std::int64_t max_new_tokens = 192;
  std::int64_t max_prompt_tokens = 448;
  std::int64_t batch = 16;        // sequences decoded together
  std::int64_t top_k = 32;        // stored entries of the target distribution
  double greedy_fraction = 0.6;   // the rest sampled at temperature 1
  double minutes = 15;            // stop starting new prompts after this; unfinished answers are kept as they are
  std::uint64_t seed = 1;
};

struct DataStats {
  std::int64_t records = 0, prompt_tokens = 0, answer_tokens = 0;
  double seconds = 0;
};

/// Runs the target over `prompts` (already in chat-template form) and writes one record per prompt.
DataStats generate_records(models::LlamaModel& target, const std::vector<std::vector<std::int32_t>>& prompts,
                                  const std::vector<std::int32_t>& stop_ids, const DataOptions& o, RecordWriter& writer,
                                  bool verbose);

/// EAGLE-3's training features: re-runs the target over each record's tokens (one prefill per record) and writes the record
/// again with features = the concatenation of the outputs of blocks `layers` ([T, 3 H], float16, in that order: what the
/// decoder hands an EAGLE-3 proposer), the tokens and the stored target distributions unchanged. Returns the records written.
std::int64_t fuse_records(models::LlamaModel& target, const std::vector<Record>& data, const std::vector<std::int64_t>& layers,
                                 RecordWriter& writer, bool verbose);

}  // namespace specdec::train
