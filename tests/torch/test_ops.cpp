// The custom ops, loaded as Python engines load them (dlopen of libspecdec_ops.so) and called through the
// dispatcher by name.
#include <ATen/core/dispatch/Dispatcher.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

// The deprecated probabilities-in entries, tested (or defined) here.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "specdec/torch/rejection_sample.hpp"

namespace {

TEST(TorchOps, LoadLibraryAndCallByName) {
  void* handle = dlopen(SPECDEC_OPS_PATH, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow("specdec::rejection_sample", "");
  const std::int64_t V = 8;
  at::Tensor ids = at::tensor(std::vector<std::int64_t>{3, 1});
  at::Tensor cu = at::tensor(std::vector<std::int64_t>{0, 2});
  at::Tensor p = at::softmax(at::arange(3 * V, at::kFloat).reshape({3, V}) * 0.1, 1);
  at::Tensor q = at::softmax(at::ones({2, V}), 1);
  at::Tensor seeds = at::tensor(std::vector<std::int64_t>{7});
  at::Tensor pos = at::tensor(std::vector<std::int64_t>{12});
  std::vector<c10::IValue> stack = {ids, cu, q, p, seeds, pos, c10::IValue(), 1.0, true, c10::IValue()};
  op.callBoxed(&stack);
  ASSERT_EQ(stack.size(), 3u);
  const auto direct = specdec::torch::rejection_sample(ids, cu, q, p, seeds, pos);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), direct.output_token_ids));
  EXPECT_TRUE(at::equal(stack[1].toTensor(), direct.num_accepted));
  EXPECT_TRUE(at::equal(stack[2].toTensor(), direct.accepted));

  // The per-request draft kind is the schema's last argument (one schema per op: no ".draft_kinds" overload any more):
  // a request flagged 0 is verified as a deterministic draft.
  for (const char* overload : {"draft_kinds"})
    EXPECT_FALSE(c10::Dispatcher::singleton().findSchema({"specdec::rejection_sample", overload}).has_value());
  at::Tensor flags = at::zeros({1}, at::kByte);
  std::vector<c10::IValue> kstack = {ids, cu, q, p, seeds, pos, c10::IValue(), 1.0, true, flags};
  op.callBoxed(&kstack);
  const auto no_probs = specdec::torch::rejection_sample(ids, cu, std::nullopt, p, seeds, pos);
  EXPECT_TRUE(at::equal(kstack[0].toTensor(), no_probs.output_token_ids));

  auto tree = c10::Dispatcher::singleton().findSchemaOrThrow("specdec::tree_rejection_sample", "");
  at::Tensor parents = at::tensor(std::vector<std::int64_t>{0, 0});
  std::vector<c10::IValue> tstack = {ids, parents, cu, q, p, seeds, pos, c10::IValue(), true, c10::IValue()};
  tree.callBoxed(&tstack);
  ASSERT_EQ(tstack.size(), 3u);
  EXPECT_EQ(tstack[0].toTensor().size(1), 3);
  EXPECT_LE(tstack[1].toTensor()[0].item<int>(), 1);  // siblings: the path has depth <= 1
  EXPECT_FALSE(c10::Dispatcher::singleton().findSchema({"specdec::tree_rejection_sample", "draft_kinds"}).has_value());
  const at::Tensor all_flagged = at::ones({1}, at::kByte);
  std::vector<c10::IValue> tkstack = {ids, parents, cu, q, p, seeds, pos, c10::IValue(), true, all_flagged};
  tree.callBoxed(&tkstack);
  EXPECT_TRUE(at::equal(tkstack[0].toTensor(), tstack[0].toTensor()));  // flagged 1 = the draft probs are used

  // Block verification of chains: its own op, the chain schema without lenience.
  auto block = c10::Dispatcher::singleton().findSchemaOrThrow("specdec::block_rejection_sample", "");
  std::vector<c10::IValue> bstack = {ids, cu, q, p, seeds, pos, c10::IValue(), true, c10::IValue()};
  block.callBoxed(&bstack);
  ASSERT_EQ(bstack.size(), 3u);
  specdec::torch::RejectionSampleOptions bo;
  bo.method = specdec::VerifyMethod::kBlock;
  const auto bdirect = specdec::torch::rejection_sample(ids, cu, q, p, seeds, pos, std::nullopt, bo);
  EXPECT_TRUE(at::equal(bstack[0].toTensor(), bdirect.output_token_ids));
  EXPECT_TRUE(at::equal(bstack[1].toTensor(), bdirect.num_accepted));
  EXPECT_TRUE(at::equal(bstack[2].toTensor(), bdirect.accepted));
}

}  // namespace
