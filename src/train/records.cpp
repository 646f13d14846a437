// specdec::train — Training records: the binary file of token ids, stored features and top-k target distributions that `specdec-train data` writes and the trainers read. (see specdec/train/records.hpp)
#include "specdec/train/records.hpp"

namespace specdec::train {

void write_tensor(std::ofstream& out, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
}

RecordFileScan scan_record_file(const fs::path& path, bool with_prompts) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("scan_record_file: cannot open '{}'", path.string()));
  const std::uintmax_t size = fs::file_size(path);
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, kRecordMagic, 8) != 0) fail(fmt::format("scan_record_file: '{}' is not a specdec-train data file", path.string()));
  std::int32_t H = 0, K = 0;
  in.read(reinterpret_cast<char*>(&H), 4);
  in.read(reinterpret_cast<char*>(&K), 4);
  if (!in || H <= 0 || K <= 0) fail(fmt::format("scan_record_file: '{}' has a bad header (hidden {}, k {})", path.string(), H, K));
  RecordFileScan s;
  s.hidden = H;
  s.k = K;
  std::uintmax_t pos = 16;
  s.complete_bytes = pos;
  std::vector<std::int32_t> tokens;
  for (;;) {
    std::int32_t head[2];
    if (!in.read(reinterpret_cast<char*>(head), 8)) break;
    const std::int32_t T = head[0], P = head[1];
    if (T < 0 || P < 0 || P > T) break;  // garbage: treated as a partial tail
    const std::uintmax_t bytes = 8 + static_cast<std::uintmax_t>(T) * (4 + 2 * static_cast<std::uintmax_t>(H) + 6 * static_cast<std::uintmax_t>(K));
    if (pos + bytes > size) break;
    if (with_prompts) {
      tokens.resize(static_cast<std::size_t>(P));
      if (!in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(P) * 4)) break;
      s.prompts.push_back(tokens);
    }
    pos += bytes;
    in.seekg(static_cast<std::streamoff>(pos));
    s.complete_bytes = pos;
    ++s.records;
    s.tokens += T;
    s.answer_tokens += T - P;
  }
  return s;
}

RecordWriter::RecordWriter(const fs::path& path, std::int64_t hidden, std::int64_t k, bool append) : hidden_(hidden), k_(k) {
  const bool exists = append && fs::exists(path) && fs::file_size(path) > 0;
  if (exists) {
    const RecordFileScan s = scan_record_file(path, false);
    if (s.hidden != hidden || s.k != k)
      fail(fmt::format("RecordWriter: cannot append to '{}': it holds features of width {} and top-{}, expected {} and top-{}",
                       path.string(), s.hidden, s.k, hidden, k));
    if (s.complete_bytes < fs::file_size(path)) fs::resize_file(path, s.complete_bytes);  // an interrupted record's tail
  }
  out_.open(path, std::ios::binary | (exists ? std::ios::app : std::ios::trunc));
  if (!out_) fail(fmt::format("RecordWriter: cannot open '{}' for writing", path.string()));
  if (!exists) {
    out_.write(kRecordMagic, 8);
    const std::int32_t h = static_cast<std::int32_t>(hidden), kk = static_cast<std::int32_t>(k);
    out_.write(reinterpret_cast<const char*>(&h), 4);
    out_.write(reinterpret_cast<const char*>(&kk), 4);
    out_.flush();
  }
}

std::vector<Record> read_records(const fs::path& path, std::int64_t* hidden_out, std::int64_t max_records) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("read_records: cannot open '{}'", path.string()));
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, kRecordMagic, 8) != 0) fail(fmt::format("read_records: '{}' is not a specdec-train data file", path.string()));
  std::int32_t H = 0, K = 0;
  in.read(reinterpret_cast<char*>(&H), 4);
  in.read(reinterpret_cast<char*>(&K), 4);
  if (hidden_out) *hidden_out = H;
  std::vector<Record> out;
  while (max_records < 0 || static_cast<std::int64_t>(out.size()) < max_records) {
    std::int32_t T = 0;
    if (!in.read(reinterpret_cast<char*>(&T), 4)) break;
    Record r;
    in.read(reinterpret_cast<char*>(&r.prompt_length), 4);
    r.tokens.resize(static_cast<std::size_t>(T));
    in.read(reinterpret_cast<char*>(r.tokens.data()), static_cast<std::streamsize>(T) * 4);
    r.features = at::empty({T, H}, at::kHalf);
    r.topk_ids = at::empty({T, K}, at::kInt);
    r.topk_probs = at::empty({T, K}, at::kHalf);
    in.read(static_cast<char*>(r.features.data_ptr()), static_cast<std::streamsize>(T) * H * 2);
    in.read(static_cast<char*>(r.topk_ids.data_ptr()), static_cast<std::streamsize>(T) * K * 4);
    in.read(static_cast<char*>(r.topk_probs.data_ptr()), static_cast<std::streamsize>(T) * K * 2);
    if (!in) break;  // a truncated last record (an interrupted run) is dropped
    out.push_back(std::move(r));
  }
  return out;
}

std::int64_t for_each_record_tokens(
    const fs::path& path,
    const std::function<void(std::span<const std::int32_t>, std::int32_t, std::span<const std::int32_t>)>& fn,
    std::int64_t max_records) {
  const RecordFileScan scan = scan_record_file(path, false);  // validates the header; counts the complete records
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("for_each_record_tokens: cannot open '{}'", path.string()));
  const auto H = static_cast<std::uintmax_t>(scan.hidden), K = static_cast<std::uintmax_t>(scan.k);
  std::uintmax_t pos = 16;
  std::vector<std::int32_t> tokens, ids, argmax;
  const std::int64_t n = max_records >= 0 ? std::min(max_records, scan.records) : scan.records;
  for (std::int64_t r = 0; r < n; ++r) {
    in.seekg(static_cast<std::streamoff>(pos));
    std::int32_t head[2];
    in.read(reinterpret_cast<char*>(head), 8);
    const auto T = static_cast<std::uintmax_t>(head[0]);
    tokens.resize(T);
    in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(T * 4));
    in.seekg(static_cast<std::streamoff>(pos + 8 + T * 4 + T * H * 2));
    ids.resize(T * K);
    in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(T * K * 4));
    if (!in) fail(fmt::format("for_each_record_tokens: '{}': record {} could not be read", path.string(), r));
    argmax.resize(T);
    for (std::uintmax_t t = 0; t < T; ++t) argmax[t] = ids[t * K];
    fn(tokens, head[1], argmax);
    pos += 8 + T * (4 + 2 * H + 6 * K);
  }
  return n;
}

std::vector<Record> read_record_files(const std::vector<std::string>& paths, std::int64_t* hidden_out, std::int64_t max_records) {
  std::vector<Record> all;
  std::int64_t H = -1;
  for (const auto& p : paths) {
    std::int64_t h = 0;
    const std::int64_t left = max_records < 0 ? -1 : max_records - static_cast<std::int64_t>(all.size());
    auto part = read_records(p, &h, left);
    if (H >= 0 && h != H) fail(fmt::format("read_records: '{}' has features of width {}, the first file {}", p, h, H));
    H = h;
    for (auto& r : part) all.push_back(std::move(r));
  }
  if (hidden_out) *hidden_out = H;
  return all;
}

}  // namespace specdec::train
