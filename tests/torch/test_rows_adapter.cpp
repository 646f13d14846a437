// specdec::torch::rows_of / tensor_of: a tensor as Rows and back share memory without a copy, each side keeps the
// other's memory alive, strided rows keep their stride, and tensors that are not 2-D float rows are named errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "specdec/torch/rows.hpp"

namespace specdec {
namespace {

TEST(RowsAdapter, TensorToRowsAndBackShareMemory) {
  const at::Tensor t = at::arange(12, at::kFloat).view({3, 4});
  const Rows r = torch::rows_of(t);
  ASSERT_TRUE(r.is_host_float32());
  EXPECT_EQ(r.rows(), 3);
  EXPECT_EQ(r.cols(), 4);
  EXPECT_EQ(r.host_float32_data(), t.data_ptr<float>());
  const at::Tensor back = torch::tensor_of(r);
  EXPECT_EQ(back.data_ptr<float>(), t.data_ptr<float>());
  EXPECT_TRUE(back.equal(t));
  t.fill_(7.0f);
  EXPECT_EQ(r.host_row(2)[3], 7.0f);
  EXPECT_FALSE(torch::rows_of(at::Tensor()).defined());
  EXPECT_FALSE(torch::tensor_of(Rows()).defined());
}

TEST(RowsAdapter, EachSideKeepsTheMemoryAlive) {
  Rows r;
  {
    at::Tensor t = at::full({2, 5}, 3.0f);
    r = torch::rows_of(t);
  }
  EXPECT_EQ(r.host_row(1)[4], 3.0f) << "the Rows hold the tensor";
  at::Tensor t;
  {
    const Rows host = Rows::host_float32(2, 2);
    host.mutable_host_float32_data()[3] = 9.0f;
    t = torch::tensor_of(host);
  }
  EXPECT_EQ(t[1][1].item<float>(), 9.0f) << "the tensor holds the Rows' owner";
}

TEST(RowsAdapter, StridedRowsKeepTheirStride) {
  const at::Tensor big = at::arange(20, at::kFloat).view({4, 5});
  const at::Tensor cols = big.narrow(1, 1, 3);  // rows 5 apart, 3 wide
  const Rows r = torch::rows_of(cols);
  EXPECT_EQ(r.row_stride(), 5);
  EXPECT_FALSE(r.contiguous());
  EXPECT_EQ(r.host_row(2)[0], 11.0f);
  EXPECT_TRUE(torch::tensor_of(r).equal(cols));
  EXPECT_EQ(torch::rows_of(big.to(at::kHalf)).dtype(), DType::kFloat16);
  EXPECT_EQ(torch::rows_of(big.to(at::kBFloat16)).dtype(), DType::kBFloat16);
  EXPECT_TRUE(torch::tensor_of(torch::rows_of(big.to(at::kHalf))).equal(big.to(at::kHalf)));
}

TEST(RowsAdapter, OtherTensorsAreNamedErrors) {
  EXPECT_THROW(torch::rows_of(at::zeros({2, 3}, at::kLong), "probs"), error);
  EXPECT_THROW(torch::rows_of(at::zeros({2, 3, 4}), "probs"), error);
  EXPECT_THROW(torch::rows_of(at::zeros({3, 4}).t(), "probs"), error);  // last dimension strided
  try {
    torch::rows_of(at::zeros({4}), "features");
    FAIL() << "expected an error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("features: expected a 2-D tensor"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specdec
