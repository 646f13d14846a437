// specdec::train — Training records: the binary file of token ids, stored features and top-k target distributions that `specdec-train data` writes and the trainers read. (see specdec/train/records.hpp)
#include "specdec/train/records.hpp"

namespace specdec::train {

void write_tensor(std::ofstream& out, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
}

std::vector<Record> read_records(const fs::path& path, std::int64_t* hidden_out) {
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
  for (;;) {
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

std::vector<Record> read_record_files(const std::vector<std::string>& paths, std::int64_t* hidden_out) {
  std::vector<Record> all;
  std::int64_t H = -1;
  for (const auto& p : paths) {
    std::int64_t h = 0;
    auto part = read_records(p, &h);
    if (H >= 0 && h != H) fail(fmt::format("read_records: '{}' has features of width {}, the first file {}", p, h, H));
    H = h;
    for (auto& r : part) all.push_back(std::move(r));
  }
  if (hidden_out) *hidden_out = H;
  return all;
}

}  // namespace specdec::train
