// specdec::Rows: host rows made zeroed and contiguous, views sharing memory and owner (narrow), the owner kept alive by
// every copy and released by the last, and sizes that do not fit as named errors.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "specdec/rows.hpp"

namespace specdec {
namespace {

TEST(Rows, HostFloat32IsZeroedContiguousAndWritable) {
  const Rows r = Rows::host_float32(3, 5);
  ASSERT_TRUE(r.defined());
  EXPECT_TRUE(r.is_host_float32());
  EXPECT_TRUE(r.contiguous());
  EXPECT_EQ(r.rows(), 3);
  EXPECT_EQ(r.cols(), 5);
  EXPECT_EQ(r.row_stride(), 5);
  for (std::int64_t i = 0; i < 15; ++i) EXPECT_EQ(r.host_float32_data()[i], 0.0f);
  const Rows copy = r;  // copies share the memory
  r.mutable_host_float32_data()[7] = 2.5f;
  EXPECT_EQ(copy.host_row(1)[2], 2.5f);
  EXPECT_FALSE(Rows().defined());
  EXPECT_FALSE(Rows().is_host_float32());
}

TEST(Rows, NarrowSharesMemoryAndOwner) {
  const Rows r = Rows::host_float32(4, 3);
  for (std::int64_t i = 0; i < 12; ++i) r.mutable_host_float32_data()[i] = static_cast<float>(i);
  const Rows mid = r.narrow(1, 2);
  EXPECT_EQ(mid.rows(), 2);
  EXPECT_EQ(mid.cols(), 3);
  EXPECT_EQ(mid.host_row(0)[0], 3.0f);
  EXPECT_EQ(mid.host_row(1)[2], 8.0f);
  EXPECT_EQ(mid.owner(), r.owner());
  EXPECT_EQ(r.narrow(4, 0).rows(), 0);
  EXPECT_THROW((void)r.narrow(3, 2), error);
  EXPECT_THROW((void)r.narrow(-1, 1), error);
  EXPECT_THROW((void)Rows().narrow(0, 0), error);
}

TEST(Rows, TheLastCopyReleasesTheOwner) {
  auto buffer = std::make_shared<std::vector<float>>(8, 1.0f);
  std::weak_ptr<std::vector<float>> watch = buffer;
  RowsView v;
  v.data = buffer->data();
  v.rows = 2;
  v.cols = 4;
  v.row_stride = 4;
  Rows a(v, buffer);
  buffer.reset();
  EXPECT_FALSE(watch.expired());
  Rows b = a.narrow(1, 1);
  a = Rows();
  EXPECT_FALSE(watch.expired()) << "a narrowed copy keeps the memory";
  EXPECT_EQ(b.host_row(0)[3], 1.0f);
  b = Rows();
  EXPECT_TRUE(watch.expired());
}

TEST(Rows, StridedDeviceAndHalfRowsAreNamed) {
  float data[12] = {};
  RowsView v;
  v.data = data;
  v.rows = 2;
  v.cols = 4;
  v.row_stride = 6;  // strided
  const Rows strided(v, nullptr);
  EXPECT_FALSE(strided.contiguous());
  EXPECT_EQ(strided.host_row(1), data + 6);
  v.row_stride = 6;
  v.dtype = DType::kFloat16;
  const Rows half(v, nullptr);
  EXPECT_FALSE(half.is_host_float32());
  try {
    (void)half.host_float32_data("probe");
    FAIL() << "expected an error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("probe: expected float32 rows in host memory, got float16 rows on the CPU"),
              std::string::npos)
        << e.what();
  }
  v.dtype = DType::kFloat32;
  v.device = Device{DeviceType::kCuda, 0};
  EXPECT_THROW((void)Rows(v, nullptr).host_float32_data(), error);
  v.device = Device{};
  v.row_stride = 3;  // rows overlap
  EXPECT_THROW(Rows(v, nullptr), error);
  v.row_stride = 4;
  v.data = nullptr;  // rows without memory
  EXPECT_THROW(Rows(v, nullptr), error);
  EXPECT_THROW(Rows::host_float32(-1, 2), error);
}

}  // namespace
}  // namespace specdec
