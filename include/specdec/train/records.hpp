// specdec::train — Training records: the binary file of token ids, stored features and top-k target distributions that `specdec-train data` writes and the trainers read.
#pragma once

#include <span>

#include "specdec/train/common.hpp"

namespace specdec::train {

// --- training records ------------------------------------------------------------------------------------------------------

/// One conversation: the tokens fed to the target and, per token, the target's post-norm final hidden state (float16) and
/// the top-k of its next-token distribution (ids, probabilities at temperature 1 as float16).
struct Record {
  std::vector<std::int32_t> tokens;  // [T]
  std::int32_t prompt_length = 0;
  at::Tensor features;               // [T, H] half
  at::Tensor topk_ids;               // [T, K] int32
  at::Tensor topk_probs;             // [T, K] half
};

constexpr char kRecordMagic[8] = {'S', 'D', 'T', 'R', 'A', 'I', 'N', '1'};

void write_tensor(std::ofstream& out, const at::Tensor& t);

/// A training-set file read without its tensors: the header's feature width and k, the complete records' count, tokens
/// and prompts, and the bytes up to the end of the last complete record (a partial record an interrupted run left at the
/// end is not counted).
struct RecordFileScan {
  std::int64_t hidden = 0, k = 0, records = 0, tokens = 0, answer_tokens = 0;
  std::uintmax_t complete_bytes = 0;
  std::vector<std::vector<std::int32_t>> prompts;  // each complete record's first prompt_length tokens (with_prompts)
};

/// Scans `path` record by record, seeking over the tensors. Throws specdec::error when the file cannot be read or is not a
/// training set.
RecordFileScan scan_record_file(const fs::path& path, bool with_prompts = true);

/// File layout: magic, int32 hidden, int32 k, then records: int32 T, int32 prompt_length, tokens int32[T],
/// features half[T, H], topk_ids int32[T, K], topk_probs half[T, K]. Each record is flushed as it is written, so a run
/// stopped at any point leaves its complete records readable; appending (append = true) to such a file first cuts off
/// a partial last record, and refuses a file of another feature width or k.
class RecordWriter {
 public:
  RecordWriter(const fs::path& path, std::int64_t hidden, std::int64_t k, bool append);
  void write(const Record& r) {
    const auto T = static_cast<std::int32_t>(r.tokens.size());
    if (r.features.size(0) != T || r.features.size(1) != hidden_ || r.topk_ids.size(1) != k_)
      fail("RecordWriter::write: record shapes do not match the file");
    out_.write(reinterpret_cast<const char*>(&T), 4);
    out_.write(reinterpret_cast<const char*>(&r.prompt_length), 4);
    out_.write(reinterpret_cast<const char*>(r.tokens.data()), static_cast<std::streamsize>(T) * 4);
    write_tensor(out_, r.features.to(at::kHalf));
    write_tensor(out_, r.topk_ids.to(at::kInt));
    write_tensor(out_, r.topk_probs.to(at::kHalf));
    out_.flush();
  }

 private:
  std::ofstream out_;
  std::int64_t hidden_, k_;
};

/// The records of a training-set file in order, at most `max_records` of them (< 0: all).
std::vector<Record> read_records(const fs::path& path, std::int64_t* hidden_out = nullptr, std::int64_t max_records = -1);

/// Reads `path` record by record without its features: calls fn(tokens, prompt_length, argmax) for each complete record,
/// argmax[t] being the target's most probable next token after tokens[0 .. t] (the first of its stored top-k). Returns
/// the records read (the first max_records when >= 0). Throws specdec::error when the file cannot be read or is not a
/// training set.
std::int64_t for_each_record_tokens(
    const fs::path& path,
    const std::function<void(std::span<const std::int32_t> tokens, std::int32_t prompt_length,
                              std::span<const std::int32_t> argmax)>& fn,
    std::int64_t max_records = -1);

/// Several training-set files read in order (all with the same feature width), the first `max_records` records of
/// them all (< 0: all).
std::vector<Record> read_record_files(const std::vector<std::string>& paths, std::int64_t* hidden_out = nullptr,
                                      std::int64_t max_records = -1);

}  // namespace specdec::train
