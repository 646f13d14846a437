// CorpusProposer: drafts what the target itself emitted after the same short context in a large corpus of its own
// answers (a static, offline counterpart of suffix decoding's global cache of earlier outputs).
//
// CorpusTable maps every context n-gram (n = 1 .. max_n, the n tokens before a position) seen in the corpus to the token
// the target emitted next there most often (its argmax when the corpus records it, else the corpus's next token), with
// that token's count and the n-gram's total. Keys are NgramIndex's 64-bit hashes (most recent token first); n-grams seen
// fewer than min_count times are dropped when the table is built. A lookup walks n = 1, 2, ... up the context's suffix
// while the table holds the n-gram and keeps the longest one whose best token passes the proposer's bounds, so drafting
// costs O(max_n log entries) a token whatever the corpus size.
//
// CorpusProposer drafts a chain: the longest match's token, appended to the context, then again, while the product of the
// drafts' confidences stays above min_path_prob. A draft's confidence (CorpusHit::confidence) is a function of the context
// and the drafts before it only (DraftBatch::confidence), so the adaptive policy's cut and a ProposerChain's
// kMostExpected selection value it like a learned drafter's. Deterministic drafts (no probs): verification is lossless
// whatever the table holds. Stateless between steps; the table is shared read-only (one table for many proposers).
//
// File layout (little-endian): magic "SDCORPS1", int32 vocab_size, int32 max_n, int64 entries, int64 positions (the
// corpus positions counted), then `entries` records of {uint64 key, uint32 token, uint16 count, uint16 total} in strictly
// increasing key order (counts saturate at 65535, keeping their ratio).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/proposers/ngram.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/sampling/status.hpp"

namespace specdec::proposers {

struct CorpusEntry {
  std::uint64_t key = 0;
  std::uint32_t token = 0;
  std::uint16_t count = 0;  ///< how often `token` followed the n-gram
  std::uint16_t total = 0;  ///< how often the n-gram was seen
};
static_assert(sizeof(CorpusEntry) == 16);

/// The longest usable match of a context in a CorpusTable.
struct CorpusHit {
  std::int64_t token = -1;
  std::int32_t n = 0;
  std::uint32_t count = 0, total = 0;
  bool found() const { return token >= 0; }
  /// share^2 x total / (total + 1) (share = count / total): the chance the target emits `token` next. Calibrated on
  /// held-out answers of the bundled target (models/TRAINING.md, "The corpus table"): a share below 1 says the context
  /// is ambiguous beyond what the share alone says, and few sightings say less than many.
  double confidence() const {
    if (total == 0) return 0.0;
    const double c = static_cast<double>(count), t = static_cast<double>(total);
    return c * c / (t * (t + 1.0));
  }
};

class CorpusTable {
 public:
  static constexpr char kMagic[8] = {'S', 'D', 'C', 'O', 'R', 'P', 'S', '1'};
  static constexpr std::int32_t kMaxN = 32;

  CorpusTable() = default;
  CorpusTable(std::int64_t vocab_size, std::int32_t max_n, std::vector<CorpusEntry> entries, std::int64_t positions)
      : vocab_(vocab_size), max_n_(max_n), positions_(positions), entries_(std::move(entries)) {
    check_shape(vocab_, max_n_, "CorpusTable");
    for (std::size_t i = 0; i < entries_.size(); ++i) check_entry(i, "CorpusTable");
  }

  std::int64_t vocab_size() const { return vocab_; }
  std::int32_t max_n() const { return max_n_; }
  std::int64_t num_entries() const { return static_cast<std::int64_t>(entries_.size()); }
  std::int64_t positions() const { return positions_; }
  std::span<const CorpusEntry> entries() const { return entries_; }

  /// The entry of an n-gram hash, or null.
  const CorpusEntry* lookup(std::uint64_t key) const {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                               [](const CorpusEntry& e, std::uint64_t k) { return e.key < k; });
    return it != entries_.end() && it->key == key ? &*it : nullptr;
  }

  /// The longest suffix of `context` (n in [min_n, max_n]) whose best next token has count >= min_count and
  /// count / total >= min_share; the walk up n stops at the first n-gram the table does not hold.
  CorpusHit find(std::span<const std::int64_t> context, std::int32_t min_n, std::uint32_t min_count, double min_share) const {
    CorpusHit hit;
    std::uint64_t h = NgramIndex::kSeed;
    const auto L = static_cast<std::int64_t>(context.size());
    for (std::int32_t n = 1; n <= max_n_ && n <= L; ++n) {
      h = NgramIndex::mix(h, context[static_cast<std::size_t>(L - n)]);
      const CorpusEntry* e = lookup(h);
      if (e == nullptr) break;
      if (n >= min_n && e->count >= min_count &&
          static_cast<double>(e->count) >= min_share * static_cast<double>(e->total))
        hit = {static_cast<std::int64_t>(e->token), n, e->count, e->total};
    }
    return hit;
  }

  /// Writes the table to `path` (through a temporary file renamed into place, so a failed write leaves no table).
  void save(const std::filesystem::path& path) const {
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw error(Status::kInvalidArgument, "CorpusTable::save: cannot open '" + tmp.string() + "' for writing");
      const std::int32_t head32[2] = {static_cast<std::int32_t>(vocab_), max_n_};
      const std::int64_t head64[2] = {num_entries(), positions_};
      out.write(kMagic, 8);
      out.write(reinterpret_cast<const char*>(head32), sizeof head32);
      out.write(reinterpret_cast<const char*>(head64), sizeof head64);
      out.write(reinterpret_cast<const char*>(entries_.data()),
                static_cast<std::streamsize>(entries_.size() * sizeof(CorpusEntry)));
      if (!out.flush()) throw error(Status::kInvalidArgument, "CorpusTable::save: writing '" + tmp.string() + "' failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
      throw error(Status::kInvalidArgument, "CorpusTable::save: cannot move the table into '" + path.string() + "'");
    }
  }

  /// Reads a table written by save(); throws specdec::error naming the file for anything else.
  static CorpusTable load(const std::filesystem::path& path) {
    const std::string where = "CorpusTable::load: '" + path.string() + "'";
    std::ifstream in(path, std::ios::binary);
    if (!in) throw error(Status::kInvalidArgument, where + ": cannot open the file");
    char magic[8] = {};
    std::int32_t head32[2] = {};
    std::int64_t head64[2] = {};
    in.read(magic, 8);
    in.read(reinterpret_cast<char*>(head32), sizeof head32);
    in.read(reinterpret_cast<char*>(head64), sizeof head64);
    if (!in || std::memcmp(magic, kMagic, 8) != 0) throw error(Status::kInvalidArgument, where + ": not a corpus table");
    check_shape(head32[0], head32[1], where);
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    const auto header = static_cast<std::uintmax_t>(8 + sizeof head32 + sizeof head64);
    if (ec || head64[0] < 0 || head64[1] < 0 ||
        size != header + static_cast<std::uintmax_t>(head64[0]) * sizeof(CorpusEntry))
      throw error(Status::kInvalidArgument, where + ": the file's size does not match its " + std::to_string(head64[0]) +
                                                " entries");
    CorpusTable t;
    t.vocab_ = head32[0];
    t.max_n_ = head32[1];
    t.positions_ = head64[1];
    t.entries_.resize(static_cast<std::size_t>(head64[0]));
    in.read(reinterpret_cast<char*>(t.entries_.data()), static_cast<std::streamsize>(t.entries_.size() * sizeof(CorpusEntry)));
    if (!in) throw error(Status::kInvalidArgument, where + ": the entries could not be read");
    for (std::size_t i = 0; i < t.entries_.size(); ++i) t.check_entry(i, where);
    return t;
  }

 private:
  static void check_shape(std::int64_t vocab, std::int32_t max_n, const std::string& where) {
    if (vocab < 1 || vocab > (std::int64_t{1} << 31) - 1)
      throw error(Status::kInvalidArgument, where + ": vocab_size: expected in [1, 2^31), got " + std::to_string(vocab));
    if (max_n < 1 || max_n > kMaxN)
      throw error(Status::kInvalidArgument, where + ": max_n: expected in [1, " + std::to_string(kMaxN) + "], got " +
                                                std::to_string(max_n));
  }
  void check_entry(std::size_t i, const std::string& where) const {
    const CorpusEntry& e = entries_[i];
    if (i > 0 && !(entries_[i - 1].key < e.key))
      throw error(Status::kInvalidArgument, where + ": entry " + std::to_string(i) + ": keys are not strictly increasing");
    if (static_cast<std::int64_t>(e.token) >= vocab_ || e.count == 0 || e.count > e.total)
      throw error(Status::kInvalidArgument, where + ": entry " + std::to_string(i) + ": token " + std::to_string(e.token) +
                                                ", count " + std::to_string(e.count) + " of " + std::to_string(e.total) +
                                                "; expected a token below " + std::to_string(vocab_) +
                                                " and 1 <= count <= total");
  }

  std::int64_t vocab_ = 0;
  std::int32_t max_n_ = 0;
  std::int64_t positions_ = 0;
  std::vector<CorpusEntry> entries_;
};

/// Builds a CorpusTable from sequences: add() each, then finish().
class CorpusTableBuilder {
 public:
  CorpusTableBuilder(std::int64_t vocab_size, std::int32_t max_n) : vocab_(vocab_size), max_n_(max_n) {
    (void)CorpusTable(vocab_size, max_n, {}, 0);  // validates both
  }

  /// Counts, for each t in [first, tokens.size()), that after tokens[0 .. t] the target emitted next[t - first] (its
  /// argmax there, or simply tokens[t + 1]), under every context n-gram ending at t. Tokens outside the vocabulary are
  /// an error naming their position.
  void add(std::span<const std::int64_t> tokens, std::span<const std::int64_t> next, std::int64_t first) {
    const auto T = static_cast<std::int64_t>(tokens.size());
    if (first < 0 || first > T || static_cast<std::int64_t>(next.size()) != T - first)
      throw error(Status::kInvalidArgument, "CorpusTableBuilder::add: expected 0 <= first <= tokens and one next token per "
                                            "position from first, got first " + std::to_string(first) + ", " +
                                                std::to_string(T) + " tokens, " + std::to_string(next.size()) + " next");
    auto check = [&](std::int64_t tok, const char* what, std::int64_t at) {
      if (tok < 0 || tok >= vocab_)
        throw error(Status::kInvalidArgument, std::string("CorpusTableBuilder::add: ") + what + " " + std::to_string(at) +
                                                  ": token " + std::to_string(tok) + " outside the vocabulary of " +
                                                  std::to_string(vocab_));
    };
    for (std::int64_t t = 0; t < T; ++t) check(tokens[static_cast<std::size_t>(t)], "position", t);
    for (std::int64_t t = first; t < T; ++t) {
      const std::int64_t y = next[static_cast<std::size_t>(t - first)];
      check(y, "next token of position", t);
      std::uint64_t h = NgramIndex::kSeed;
      for (std::int32_t n = 1; n <= max_n_ && n <= t + 1; ++n) {
        h = NgramIndex::mix(h, tokens[static_cast<std::size_t>(t - n + 1)]);
        pairs_.push_back({h, static_cast<std::uint32_t>(y)});
      }
      ++positions_;
    }
  }

  /// The table of the n-grams seen at least min_count times (>= 1).
  CorpusTable finish(std::uint32_t min_count) && {
    if (min_count < 1) throw error(Status::kInvalidArgument, "CorpusTableBuilder::finish: min_count: expected >= 1, got 0");
    std::sort(pairs_.begin(), pairs_.end());
    std::vector<CorpusEntry> entries;
    for (std::size_t i = 0; i < pairs_.size();) {
      std::size_t j = i;
      std::uint64_t total = 0, best = 0;
      std::uint32_t best_token = 0;
      while (j < pairs_.size() && pairs_[j].first == pairs_[i].first) {
        std::size_t k = j;
        while (k < pairs_.size() && pairs_[k] == pairs_[j]) ++k;
        total += k - j;
        if (k - j > best) best = k - j, best_token = pairs_[j].second;  // ties: the smaller token (sorted first)
        j = k;
      }
      if (total >= min_count) {
        // Saturate at 65535 keeping the ratio.
        const double scale = total > 65535 ? 65535.0 / static_cast<double>(total) : 1.0;
        const auto c16 = static_cast<std::uint16_t>(std::max<double>(1.0, static_cast<double>(best) * scale));
        const auto t16 = static_cast<std::uint16_t>(std::min<double>(65535.0, static_cast<double>(total) * scale));
        entries.push_back({pairs_[i].first, best_token, c16, std::max(c16, t16)});
      }
      i = j;
    }
    pairs_.clear();
    pairs_.shrink_to_fit();
    return CorpusTable(vocab_, max_n_, std::move(entries), positions_);
  }

 private:
  std::int64_t vocab_;
  std::int32_t max_n_;
  std::int64_t positions_ = 0;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> pairs_;
};

struct CorpusOptions {
  std::int32_t min_n = 2;          ///< shortest context n-gram to draft from
  std::uint32_t min_count = 2;     ///< the best token's count at least this
  double min_share = 0.5;          ///< and at least this share of the n-gram's total
  std::int32_t max_drafts = 8;     ///< cap on drafts per step on top of the decoder's g
  double min_path_prob = 0.1;      ///< the chain ends where the product of its drafts' confidences falls below this
};

class CorpusProposer {
 public:
  /// Lookups in a table (has_lookup_drafts).
  bool drafts_are_lookups() const { return true; }
  /// Fills DraftBatch::confidence (has_draft_confidence).
  bool reports_confidence() const { return true; }

  CorpusProposer(std::shared_ptr<const CorpusTable> table, CorpusOptions options = {})
      : table_(std::move(table)), options_(options) {
    auto bad = [](const std::string& what) { throw error(Status::kInvalidArgument, "CorpusProposer: " + what); };
    if (!table_) bad("table: expected a table, got none");
    if (options.min_n < 1 || options.min_n > table_->max_n())
      bad("CorpusOptions.min_n: expected in [1, the table's max_n = " + std::to_string(table_->max_n()) + "], got " +
          std::to_string(options.min_n));
    if (options.min_count < 1) bad("CorpusOptions.min_count: expected >= 1, got 0");
    if (!(options.min_share >= 0.0 && options.min_share <= 1.0)) bad("CorpusOptions.min_share: expected in [0, 1]");
    if (options.max_drafts < 0) bad("CorpusOptions.max_drafts: expected >= 0, got " + std::to_string(options.max_drafts));
    if (!(options.min_path_prob >= 0.0 && options.min_path_prob <= 1.0)) bad("CorpusOptions.min_path_prob: expected in [0, 1]");
  }

  std::int64_t vocab_size() const { return table_->vocab_size(); }
  const CorpusTable& table() const { return *table_; }
  const CorpusOptions& options() const { return options_; }

  void begin_request(const RequestContext&) {}
  void end_request(RequestId) {}
  void observe(std::span<const StepFeedback>) {}

  DraftBatch propose(std::span<const ProposeRequest> requests) {
    DraftBatch batch;
    batch.cu_num_drafts.push_back(0);
    std::vector<std::int64_t> drafts;
    std::vector<float> conf;
    for (const auto& r : requests) {
      draft(r.context, std::min(r.max_drafts, options_.max_drafts), drafts, conf);
      batch.append(drafts);
      batch.confidence.insert(batch.confidence.end(), conf.begin(), conf.end());
    }
    return batch;
  }

  /// The chain for one context (exposed for tests and benchmarks).
  void draft(std::span<const std::int64_t> context, std::int32_t g, std::vector<std::int64_t>& drafts,
             std::vector<float>& confidence) const {
    drafts.clear();
    confidence.clear();
    if (g <= 0) return;
    const auto keep = std::min<std::size_t>(context.size(), static_cast<std::size_t>(table_->max_n()));
    std::vector<std::int64_t> window(context.end() - static_cast<std::ptrdiff_t>(keep), context.end());
    double path = 1.0;
    while (static_cast<std::int32_t>(drafts.size()) < g) {
      const CorpusHit hit = table_->find(window, options_.min_n, options_.min_count, options_.min_share);
      if (!hit.found() || path * hit.confidence() < options_.min_path_prob) break;
      path *= hit.confidence();
      drafts.push_back(hit.token);
      confidence.push_back(static_cast<float>(hit.confidence()));
      window.push_back(hit.token);
      if (static_cast<std::int32_t>(window.size()) > table_->max_n()) window.erase(window.begin());
    }
  }

 private:
  std::shared_ptr<const CorpusTable> table_;
  CorpusOptions options_;
};

}  // namespace specdec::proposers
