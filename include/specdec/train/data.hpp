// specdec::train — Training data from the target: self-distilled answers with stored features and top-k distributions, and the EAGLE-3 fused features.
#pragma once

#include <functional>
#include <utility>

#include "specdec/train/records.hpp"
#include "specdec/train/corpus.hpp"

namespace specdec::train {

// --- data generation -------------------------------------------------------------------------------------------------------

/// One entry of a temperature mix: the share `weight` (any non-negative scale) of the records answered at `temperature`
/// (0 = greedy).
struct TemperatureShare {
  double temperature = 0;
  double weight = 1;
};

struct DataOptions {
  std::int64_t max_new_tokens = 192;
  std::int64_t max_prompt_tokens = 448;  // longer prompts are skipped (DataStats::skipped), not cut
  std::int64_t batch = 16;        // sequences decoded together
  std::int64_t top_k = 32;        // stored entries of the target distribution
  /// The temperatures answers are sampled at, with their shares; each prompt draws one from (seed, prompt index).
  /// Empty: greedy for greedy_fraction of the prompts, temperature 1 for the rest.
  std::vector<TemperatureShare> temperatures;
  double greedy_fraction = 0.6;
  /// Prompt rows one forward prefills at most (the decode rows of every active sequence ride along in the same
  /// forward); a prompt longer than this is prefilled alone.
  std::int64_t prefill_rows = 1024;
  double minutes = 15;            // stop starting new prompts after this; the answers under way finish
  std::uint64_t seed = 1;
};

struct DataStats {
  std::int64_t records = 0, prompt_tokens = 0, answer_tokens = 0;
  std::int64_t skipped = 0;     // prompts longer than max_prompt_tokens
  std::int64_t forwards = 0;
  double seconds = 0;           // wall
  double forward_seconds = 0;   // inside the target's forward
  double rows_seconds = 0;      // top-k, softmax, sampling and float16 features of every row
  double write_seconds = 0;     // records assembled and written
  double cpu_seconds = 0;       // CPU time of the process (all threads) over the run
  std::int64_t target_tokens() const { return prompt_tokens + answer_tokens; }
};

/// "0:0.4,0.7:0.3,1:0.3" -> {{0, 0.4}, {0.7, 0.3}, {1, 0.3}}; a bare "0.7" is {0.7, 1}. Throws specdec::error naming
/// `what` on a malformed entry, a negative temperature or weight, or weights summing to 0.
std::vector<TemperatureShare> parse_temperature_mix(const std::string& text, const std::string& what = "--temperatures");

/// The temperature prompt `prompt_index` is answered at under `o` (a function of o.seed and the index alone).
double record_temperature(const DataOptions& o, std::size_t prompt_index);

/// Receives each finished record with the index of its prompt.
using RecordSink = std::function<void(std::size_t prompt_index, const Record& record)>;

/// Runs the target over `prompts` (already in chat-template form) and hands one record per prompt to `sink`, in the order
/// the answers finish. Prompts whose `skip` entry is true (a resumed run's finished ones; `skip` empty or prompts.size()
/// long) are left out. Every sequence's tokens depend only on its prompt, its index and o.seed (per-token uniforms from
/// Philox keyed by them), not on which other prompts share its forwards.
DataStats generate_records(models::LlamaModel& target, const std::vector<std::vector<std::int32_t>>& prompts,
                           const std::vector<std::int32_t>& stop_ids, const DataOptions& o, const RecordSink& sink, bool verbose,
                           const std::vector<bool>& skip = {});

/// The same, writing every record to `writer`.
DataStats generate_records(models::LlamaModel& target, const std::vector<std::vector<std::int32_t>>& prompts,
                           const std::vector<std::int32_t>& stop_ids, const DataOptions& o, RecordWriter& writer,
                           bool verbose);

namespace detail {

/// One row of logits [V]: the top `k` of softmax(logits) (ids by decreasing probability, ties to the lower id, the
/// probabilities as float16 bits) into ids[0..k) and probs[0..k); returns the next token at `temperature` (0: the first
/// argmax; otherwise the first token whose running weight exp((l - max) / T) reaches u x the total; u in (0, 1)).
/// `scratch` holds V floats. Needs 1 <= k <= V.
std::int32_t summarise_logits_row(const float* logits, std::int64_t V, std::int64_t k, std::int32_t* ids,
                                  std::uint16_t* probs, double temperature, float u, float* scratch);

}  // namespace detail

/// EAGLE-3's training features: re-runs the target over each record's tokens (one prefill per record) and writes the record
/// again with features = the concatenation of the outputs of blocks `layers` ([T, 3 H], float16, in that order: what the
/// decoder hands an EAGLE-3 proposer), the tokens and the stored target distributions unchanged. Returns the records written.
std::int64_t fuse_records(models::LlamaModel& target, const std::vector<Record>& data, const std::vector<std::int64_t>& layers,
                                 RecordWriter& writer, bool verbose);

}  // namespace specdec::train
