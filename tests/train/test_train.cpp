// specdec-train: data records mirror the target's features, both trainers reduce their loss, the saved checkpoints load with
// the library's loaders and compute what the trainer computed, and the committed SmolLM2 drafts are lossless at temperature 0.
#include "specdec/train/corpus.hpp"
#include "specdec/train/data.hpp"
#include "specdec/train/modules.hpp"
#include "specdec/train/records.hpp"
#include "specdec/train/trainer.hpp"

#include <gtest/gtest.h>

#include <unordered_map>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/proposers/draft_model.hpp"
#include "specdec/proposers/proposer.hpp"
#include "specdec/torch/rows.hpp"
#include "specdec/torch/float_tensor.hpp"  // after the train headers, whose torch:: is libtorch's
#include "specdec/torch/rows.hpp"

namespace {

namespace fs = std::filesystem;
namespace st = specdec::train;
using specdec::models::LlamaConfig;
using specdec::models::LlamaModel;

struct TinyTarget {
  LlamaConfig cfg;
  std::unordered_map<std::string, at::Tensor> w;
  std::optional<LlamaModel> model;
  specdec::proposers::EagleTargetWeights tw;
};

TinyTarget make_target() {
  TinyTarget t;
  LlamaConfig& c = t.cfg;
  c.vocab_size = 96;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rope_theta = 10000;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 256;
  torch::manual_seed(7);
  auto r = [](std::vector<std::int64_t> s, double std) { return torch::randn(s) * std; };
  t.w["model.embed_tokens.weight"] = r({96, 32}, 1.0);
  t.w["model.norm.weight"] = torch::ones({32});
  for (int l = 0; l < 2; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    t.w[p + "input_layernorm.weight"] = torch::ones({32});
    t.w[p + "post_attention_layernorm.weight"] = torch::ones({32});
    t.w[p + "self_attn.q_proj.weight"] = r({32, 32}, 0.3);
    t.w[p + "self_attn.k_proj.weight"] = r({16, 32}, 0.3);
    t.w[p + "self_attn.v_proj.weight"] = r({16, 32}, 0.2);
    t.w[p + "self_attn.o_proj.weight"] = r({32, 32}, 0.2);
    t.w[p + "mlp.gate_proj.weight"] = r({64, 32}, 0.2);
    t.w[p + "mlp.up_proj.weight"] = r({64, 32}, 0.2);
    t.w[p + "mlp.down_proj.weight"] = r({32, 64}, 0.15);
  }
  specdec::models::LlamaOptions o;
  o.initial_cache_slots = 4;
  o.num_threads = 1;
  t.model.emplace(c, specdec::train::weights_of(t.w), o);
  t.tw.embed_tokens = specdec::torch::float_tensor_of(t.w["model.embed_tokens.weight"]);
  t.tw.lm_head = t.tw.embed_tokens;
  return t;
}

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / fmt::format("specdec-train-test-{}-{}", name, ::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::vector<st::Record> make_records(TinyTarget& t, const fs::path& dir) {
  std::vector<std::vector<std::int32_t>> prompts;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 6; ++i) {
    std::vector<std::int32_t> p;
    for (int j = 0; j < 10 + 3 * i; ++j) p.push_back(static_cast<std::int32_t>(rng() % 96));
    prompts.push_back(p);
  }
  st::DataOptions o;
  o.max_new_tokens = 14;
  o.batch = 3;
  o.top_k = 8;
  o.greedy_fraction = 0.5;
  o.minutes = 5;
  {
    st::RecordWriter w(dir / "data.bin", 32, 8, false);
    const auto stats = st::generate_records(*t.model, prompts, {}, o, w, false);
    EXPECT_EQ(stats.records, 6);
  }
  return st::read_records(dir / "data.bin");
}

// Options of the short training runs below: a high rate, 64 rows a step, at most `epochs` passes or 2 minutes, quiet.
st::TrainOptions quick_options(double epochs) {
  st::TrainOptions o;
  o.lr = 1e-2;
  o.warmup_steps = 2;
  o.tokens_per_step = 64;
  o.epochs = epochs;
  o.minutes = 2;
  o.verbose = false;
  return o;
}

// At least 10 steps ran and the mean loss of the last 5 is below `ratio` x the first step's.
void expect_loss_falls(const st::TrainResult& res, double ratio) {
  ASSERT_GE(res.step_losses.size(), 10u);
  const double tail = std::accumulate(res.step_losses.end() - 5, res.step_losses.end(), 0.0) / 5;
  EXPECT_LT(tail, ratio * res.first_loss);
}

TEST(Train, RecordsHoldTheTargetsPostNormFeaturesAndTopK) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("records");
  const auto recs = make_records(t, dir);
  ASSERT_EQ(recs.size(), 6u);
  for (const auto& r : recs) {
    // A fresh whole-sequence forward gives the same post-norm features (fp16 storage) and the same top-1.
    const std::int64_t slot = t.model->allocate_sequence();
    auto b = specdec::models::make_chain_batch(slot, std::vector<std::int64_t>(r.tokens.begin(), r.tokens.end()));
    b.return_final_hidden = true;
    const auto out = t.model->forward(b);
    t.model->free_sequence(slot);
    EXPECT_EQ(static_cast<std::int64_t>(r.tokens.size()), 14 + r.prompt_length);
    EXPECT_TRUE(at::allclose(r.features.to(at::kFloat), specdec::torch::tensor_of(out.hidden_post_norm), 1e-2, 1e-2));
    EXPECT_TRUE(at::equal(r.topk_ids.select(1, 0).to(at::kLong), specdec::torch::tensor_of(out.logits).argmax(-1)));
    const auto p = r.topk_probs.to(at::kFloat);
    EXPECT_TRUE((p.narrow(1, 0, 7) >= p.narrow(1, 1, 7)).all().item<bool>());
  }
  fs::remove_all(dir);
}

// With answers_only the loss reads only the rows that predict answer tokens: it counts those rows, and the prompt rows'
// top-k targets do not move it, while an answer row's do.
// `r` with the top-k targets of rows [begin, end) reversed (other ids in the rows' cross-entropy).
st::Record with_flipped_targets(const st::Record& r, std::int64_t begin, std::int64_t end) {
  st::Record changed = r;
  changed.topk_ids = r.topk_ids.clone();
  for (std::int64_t i = begin; i < end; ++i) changed.topk_ids[i] = changed.topk_ids[i].flip(0);
  return changed;
}

TEST(Train, EagleLossOnAnswerRowsOnlyIgnoresThePrompt) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("answers");
  const auto recs = make_records(t, dir);
  st::EagleTrainable m(t.cfg, t.tw, 1);
  const st::Record& r = recs[0];
  ASSERT_GE(r.prompt_length, 4);
  const std::int64_t n = static_cast<std::int64_t>(r.tokens.size()) - 1;
  auto loss = [&](const st::Record& rec, bool answers_only) {
    std::mt19937_64 rng(5);
    torch::NoGradGuard ng;
    return st::eagle_loss(m, rec, 640, torch::Tensor(), 1.0, rng, 2, 0.8, answers_only);
  };
  const auto all = loss(r, false), ans = loss(r, true);
  EXPECT_EQ(all.rows, n);
  EXPECT_EQ(ans.rows, n - (r.prompt_length - 2));
  // Change the cross-entropy targets of the prompt rows (row i reads the top-k at i + 1; rows 0 .. prompt_length - 3
  // predict prompt tokens). Their features cannot change alone: a row's target feature is the next row's input.
  const st::Record changed = with_flipped_targets(r, 1, r.prompt_length - 1);
  EXPECT_EQ(loss(changed, true).total.item<double>(), ans.total.item<double>());
  EXPECT_NE(loss(changed, false).total.item<double>(), all.total.item<double>());
  EXPECT_NE(loss(with_flipped_targets(r, n, n + 1), true).total.item<double>(), ans.total.item<double>());
  fs::remove_all(dir);
}

TEST(Train, EagleLossDecreasesAndTheCheckpointRoundTrips) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("eagle");
  const auto recs = make_records(t, dir);
  st::EagleTrainable m(t.cfg, t.tw, 1);
  st::TrainOptions o = quick_options(30);
  o.ce_fraction = 1.0;
  o.checkpoint = dir / "state";
  expect_loss_falls(st::train_eagle(m, recs, o), 0.8);
  // Resuming restores the state (the step counter lives in state.txt).
  EXPECT_TRUE(fs::exists(dir / "state" / "params.pt"));

  m.save(dir / "head", t.tw);
  auto head = specdec::proposers::load_eagle_head(dir / "head", t.tw);
  EXPECT_FALSE(head.owns_embedding());
  // The loaded head (float16 weights) computes the trainer's forward on a record's chain.
  const auto& r = recs[0];
  const std::int64_t n = static_cast<std::int64_t>(r.tokens.size()) - 1;
  auto tokens = torch::tensor(std::vector<std::int64_t>(r.tokens.begin(), r.tokens.end()));
  auto feats = r.features.to(at::kFloat);
  {
    torch::NoGradGuard ng;
    for (auto& p : m.parameters()) p.copy_(p.to(at::kHalf).to(at::kFloat));
  }
  at::Tensor want;
  {
    torch::NoGradGuard ng;
    want = m.forward(tokens.narrow(0, 1, n), feats.narrow(0, 0, n));
  }
  specdec::proposers::EagleHeadBatch hb;
  hb.slots = {head.allocate_sequence()};
  hb.cu_num_tokens = {0, n};
  for (std::int64_t i = 1; i <= n; ++i) hb.token_ids.push_back(r.tokens[static_cast<std::size_t>(i)]);
  hb.features = specdec::torch::rows_of(feats.narrow(0, 0, n).contiguous());
  hb.commit = true;
  const at::Tensor got = specdec::torch::tensor_of(head.forward(hb).hidden);
  EXPECT_TRUE(at::allclose(got, want, 1e-3, 1e-3)) << (got - want).abs().max().item<float>();
  fs::remove_all(dir);
}

// bfloat16 autocast computes the same objective as float32 to bfloat16's precision: the loss within 1% and the
// gradient pointing the same way (cosine > 0.99), while the products really run in bfloat16 inside the guard and in
// float32 after it.
TEST(Train, Bf16AutocastKeepsTheLossAndTheGradient) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("bf16");
  const auto recs = make_records(t, dir);
  st::EagleTrainable m(t.cfg, t.tw, 1);
  m.set_requires_grad();
  const torch::Tensor noise = torch::zeros({t.cfg.hidden_size});
  auto loss_and_grad = [&](bool bf16) {
    for (auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
    const st::AutocastBf16 amp(bf16);
    std::mt19937_64 rng(7);
    auto L = st::eagle_loss(m, recs[0], 640, noise, 1.0, rng, 3, 0.8, false);
    L.total.backward();
    std::vector<torch::Tensor> g;
    for (auto& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().flatten().clone() : torch::zeros({p.numel()}));
    return std::pair<double, torch::Tensor>(L.total.item<double>(), torch::cat(g).to(at::kDouble));
  };
  const auto [l32, g32] = loss_and_grad(false);
  const auto [l16, g16] = loss_and_grad(true);
  EXPECT_NEAR(l16, l32, 0.01 * std::abs(l32));
  const double cosine = (g32 * g16).sum().item<double>() / (g32.norm().item<double>() * g16.norm().item<double>());
  EXPECT_GT(cosine, 0.99);
  EXPECT_GT((g32 - g16).abs().max().item<double>(), 0.0);  // the two really ran in different precisions
  const auto a = torch::randn({4, 8}), b = torch::randn({8, 4});
  {
    const st::AutocastBf16 amp(true);
    EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kFloat);
  fs::remove_all(dir);
}

// --sitting-minutes: each call stops after its sitting (here: one step) and saves the state; rerunning continues the
// same schedule until it ends, and only the last call reports it finished. The step count of the sittings together is
// the schedule's (the same rows budget as one uninterrupted call, within one step's rows).
TEST(Train, SittingsContinueOneSchedule) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("sitting");
  const auto recs = make_records(t, dir);
  st::TrainOptions o = quick_options(3);
  o.minutes = 1e5;
  st::EagleTrainable whole(t.cfg, t.tw, 1);
  const auto one = st::train_eagle(whole, recs, o);
  ASSERT_TRUE(one.finished);
  ASSERT_GE(one.steps, 4);
  o.sitting_minutes = 1e-9;
  o.checkpoint = dir / "state";
  st::EagleTrainable m(t.cfg, t.tw, 1);
  int calls = 0;
  st::TrainResult r;
  do {
    r = st::train_eagle(m, recs, o);
    ++calls;
    ASSERT_EQ(r.steps, 1) << "call " << calls;  // one step a sitting
    ASSERT_LE(calls, 4 * one.steps);
  } while (!r.finished && calls < 4 * one.steps);
  EXPECT_TRUE(r.finished);
  EXPECT_NEAR(static_cast<double>(calls), static_cast<double>(one.steps), 1.0);
  EXPECT_NEAR(static_cast<double>(r.rows), static_cast<double>(one.rows), static_cast<double>(o.tokens_per_step) * 2);
  fs::remove_all(dir);
}

// EAGLE-3's training set: the records again with the outputs of the target blocks `layers`, concatenated.
std::vector<st::Record> fuse(TinyTarget& t, const std::vector<st::Record>& recs, const std::vector<std::int64_t>& layers,
                             const fs::path& dir) {
  {
    st::RecordWriter w(dir / "fused.bin", 3 * t.cfg.hidden_size, recs.front().topk_ids.size(1), false);
    EXPECT_EQ(st::fuse_records(*t.model, recs, layers, w, false), static_cast<std::int64_t>(recs.size()));
  }
  return st::read_records(dir / "fused.bin");
}

// The unrolled steps of the training-time test compute exactly what the library's head computes when it drafts a chain:
// step k, row i == the k-th draft row after committing rows 0..i-k+1, fed the earlier steps' outputs as features. With a
// draft vocabulary the saved head scores the same rows (EAGLE-1: of the target's LM head; EAGLE-3: of its own, started
// from the target's).
void check_training_time_test(specdec::proposers::EagleVersion version, std::int64_t layers = 1) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("ttt");
  auto recs = make_records(t, dir);
  const bool e3 = version == specdec::proposers::EagleVersion::kEagle3;
  if (e3) recs = fuse(t, recs, specdec::proposers::eagle3_default_feature_layers(t.cfg.num_layers), dir);
  st::EagleTrainable m(t.cfg, t.tw, 3, version, layers);
  ASSERT_EQ(recs.front().features.size(1), m.feature_width());
  {  // some spread in fc's feature half so that the steps differ
    torch::NoGradGuard ng;
    m.fc_w.add_(torch::randn(m.fc_w.sizes()) * 0.1);
  }
  auto [ids, coverage] = st::frequent_argmax_tokens(recs, t.cfg.vocab_size, 40);
  EXPECT_GT(coverage, 0.0);
  EXPECT_LE(coverage, 1.0);
  m.set_draft_vocabulary(ids);
  ASSERT_EQ(m.draft_vocab(), 40);
  m.save(dir / "head", t.tw);
  auto head = specdec::proposers::load_eagle_head(dir / "head", t.tw);
  EXPECT_EQ(head.version(), version);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(head.draft_to_target(), ids);
  {  // float16 weights on both sides
    torch::NoGradGuard ng;
    for (auto& p : m.parameters()) p.copy_(p.to(at::kHalf).to(at::kFloat));
  }

  const auto& r = recs[0];
  const std::int64_t n = static_cast<std::int64_t>(r.tokens.size()) - 1;
  ASSERT_GE(n, 8);
  auto tokens = torch::tensor(std::vector<std::int64_t>(r.tokens.begin(), r.tokens.end()));
  auto feats = r.features.to(at::kFloat);
  std::vector<torch::Tensor> outs;
  {
    torch::NoGradGuard ng;
    outs = m.forward_steps(tokens.narrow(0, 1, n), feats.narrow(0, 0, n), 3);
  }
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_FALSE(at::allclose(outs[1], outs[0], 1e-3, 1e-3)) << "step 2 should read the head's own outputs";
  for (std::int64_t i : {std::int64_t{2}, std::int64_t{5}, n - 1}) {
    SCOPED_TRACE("row " + std::to_string(i));
    const std::int64_t slot = head.allocate_sequence();
    specdec::proposers::EagleHeadBatch pre;  // committed rows 0..i-2 (true features)
    pre.slots = {slot};
    pre.cu_num_tokens = {0, i - 1};
    for (std::int64_t j = 1; j <= i - 1; ++j) pre.token_ids.push_back(r.tokens[static_cast<std::size_t>(j)]);
    pre.features = specdec::torch::rows_of(feats.narrow(0, 0, i - 1).contiguous());
    pre.commit = true;
    (void)head.forward(pre);
    specdec::proposers::EagleHeadBatch d;  // drafts 2 and 3: rows i-1 and i
    d.slots = {slot};
    d.cu_num_tokens = {0, 2};
    d.token_ids = {r.tokens[static_cast<std::size_t>(i)], r.tokens[static_cast<std::size_t>(i + 1)]};
    d.features = specdec::torch::rows_of(torch::stack({outs[0][i - 2], outs[1][i - 1]}).contiguous());
    d.features_are_head_hidden = e3;  // EAGLE-3 feeds the head's own outputs past fc, as its proposer drafts
    const auto out = head.forward(d);
    const at::Tensor hidden = specdec::torch::tensor_of(out.hidden), logits = specdec::torch::tensor_of(out.logits);
    EXPECT_TRUE(at::allclose(hidden[0], outs[1][i - 1], 1e-3, 1e-3)) << (hidden[0] - outs[1][i - 1]).abs().max().item<float>();
    EXPECT_TRUE(at::allclose(hidden[1], outs[2][i], 1e-3, 1e-3)) << (hidden[1] - outs[2][i]).abs().max().item<float>();
    EXPECT_TRUE(at::allclose(logits, m.logits(hidden), 1e-4, 1e-4));
    head.free_sequence(slot);
  }
  {  // eagle_step_accuracy's step 1 on this record = the share of rows whose draft argmax is the target's argmax
    torch::NoGradGuard ng;
    auto am = m.draft_ids.index({m.logits(outs[0]).argmax(-1)});
    const double want = am.eq(r.topk_ids.narrow(0, 1, n).select(1, 0).to(torch::kLong)).to(torch::kDouble).mean().item<double>();
    const auto acc = st::eagle_step_accuracy(m, {r}, 3, 640, false);
    ASSERT_EQ(acc.size(), 3u);
    EXPECT_NEAR(acc[0], want, 1e-9);
  }
  {  // eagle_sampled_overlap against a row-by-row fp64 reference: sum_v min(p_T(v), q_T(v)) from the stored top-k
    torch::NoGradGuard ng;
    const double T = 0.7;
    const at::Tensor z = m.logits(outs[0]).to(torch::kDouble);  // [n, Vd]
    const auto draft = m.draft_ids.to(torch::kLong);
    double overlap = 0, top = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const at::Tensor q = torch::softmax(z[i] / T, -1);
      const at::Tensor pk = r.topk_probs[i + 1].to(torch::kDouble).clamp_min(1e-30);
      const at::Tensor pt = torch::pow(pk, 1.0 / T) / torch::pow(pk, 1.0 / T).sum();
      for (std::int64_t j = 0; j < pk.size(0); ++j) {
        const std::int64_t id = r.topk_ids[i + 1][j].item<std::int64_t>();
        double qv = 0;
        for (std::int64_t d = 0; d < draft.size(0); ++d)
          if (draft[d].item<std::int64_t>() == id) qv = q[d].item<double>();
        overlap += std::min(pt[j].item<double>(), qv);
      }
      top += torch::softmax(z[i] / (T * 0.8), -1).max().item<double>();
    }
    const auto overlaps = st::eagle_sampled_overlap(m, {r}, 640, false, {T, 1.0}, {1.0, 0.8});
    ASSERT_EQ(overlaps.size(), 2u);
    const auto& ov = overlaps[0];
    EXPECT_EQ(ov.rows, static_cast<double>(n));
    EXPECT_NEAR(ov.mean_overlap, overlap / static_cast<double>(n), 2e-6);
    ASSERT_EQ(ov.mean_top.size(), 2u);
    EXPECT_NEAR(ov.mean_top[1], top / static_cast<double>(n), 2e-6);
    EXPECT_GT(ov.mean_overlap, 0.0);
    EXPECT_LE(ov.mean_overlap, 1.0 + 1e-6);
  }
  // The multi-step loss trains (it falls) with the draft vocabulary.
  st::TrainOptions o = quick_options(30);
  o.ce_fraction = 1.0;
  o.ttt_steps = 3;
  expect_loss_falls(st::train_eagle(m, recs, o), 0.8);
  fs::remove_all(dir);
}

TEST(Train, TrainingTimeTestStepsAreTheHeadsChainDrafts) { check_training_time_test(specdec::proposers::EagleVersion::kEagle1); }

TEST(Train, TwoLayerTrainingTimeTestStepsAreTheHeadsChainDrafts) {
  check_training_time_test(specdec::proposers::EagleVersion::kEagle1, 2);
}

// A 2-layer head started from a saved 1-layer head (--init) computes the saved head's outputs until it trains: its
// second layer starts as the identity. A head of more layers than the one trained is refused.
TEST(Train, DeeperHeadStartsFromAShallowerOneAsItsOutputs) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("deeper");
  const auto recs = make_records(t, dir);
  st::EagleTrainable one(t.cfg, t.tw, 5);
  {
    torch::NoGradGuard ng;
    one.fc_w.add_(torch::randn(one.fc_w.sizes()) * 0.1);
    for (auto& p : one.parameters()) p.copy_(p.to(at::kHalf).to(at::kFloat));  // what the saved head holds
  }
  one.save(dir / "one", t.tw);
  st::EagleTrainable two(t.cfg, t.tw, 6, specdec::proposers::EagleVersion::kEagle1, 2);
  ASSERT_EQ(two.more_layers.size(), 1u);
  EXPECT_GT(two.more_layers[0].down.abs().max().item<float>(), 0.f);
  two.load_from(dir / "one", t.tw);
  EXPECT_EQ(two.more_layers[0].down.abs().max().item<float>(), 0.f);
  const auto& r = recs[0];
  const std::int64_t n = static_cast<std::int64_t>(r.tokens.size()) - 1;
  auto tokens = torch::tensor(std::vector<std::int64_t>(r.tokens.begin(), r.tokens.end()));
  auto feats = r.features.to(at::kFloat);
  {
    torch::NoGradGuard ng;
    const auto a = one.forward_steps(tokens.narrow(0, 1, n), feats.narrow(0, 0, n), 2);
    const auto b = two.forward_steps(tokens.narrow(0, 1, n), feats.narrow(0, 0, n), 2);
    for (std::size_t k = 0; k < 2; ++k) EXPECT_TRUE(a[k].equal(b[k])) << "step " << k + 1;
  }
  // It trains (the loss falls), and the saved 2-layer head loads.
  st::TrainOptions o = quick_options(30);
  o.ce_fraction = 1.0;
  expect_loss_falls(st::train_eagle(two, recs, o), 0.8);
  two.save(dir / "two", t.tw);
  EXPECT_EQ(specdec::proposers::load_eagle_head(dir / "two", t.tw).config().layer.num_layers, 2);
  st::EagleTrainable back(t.cfg, t.tw, 7);
  EXPECT_THROW(back.load_from(dir / "two", t.tw), std::exception);
  fs::remove_all(dir);
}

TEST(Train, Eagle3TrainingTimeTestStepsAreTheHeadsChainDrafts) {
  check_training_time_test(specdec::proposers::EagleVersion::kEagle3);
}

// `fuse` stores, per token, the outputs of the three target blocks a fresh forward returns (float16), in their order, and
// keeps the tokens and target distributions.
TEST(Train, FusedRecordsHoldTheTargetsLayerOutputs) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("fuse");
  const auto recs = make_records(t, dir);
  const std::vector<std::int64_t> layers = {1, 0, 1};
  const auto fused = fuse(t, recs, layers, dir);
  ASSERT_EQ(fused.size(), recs.size());
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const auto& r = fused[i];
    EXPECT_EQ(r.tokens, recs[i].tokens);
    EXPECT_EQ(r.prompt_length, recs[i].prompt_length);
    EXPECT_TRUE(at::equal(r.topk_ids, recs[i].topk_ids));
    EXPECT_TRUE(at::equal(r.topk_probs, recs[i].topk_probs));
    const std::int64_t slot = t.model->allocate_sequence();
    auto b = specdec::models::make_chain_batch(slot, std::vector<std::int64_t>(r.tokens.begin(), r.tokens.end()));
    b.hidden_layers = layers;
    const auto out = t.model->forward(b);
    t.model->free_sequence(slot);
    ASSERT_EQ(r.features.size(1), 3 * t.cfg.hidden_size);
    for (int j = 0; j < 3; ++j)
      EXPECT_TRUE(at::allclose(r.features.narrow(1, j * t.cfg.hidden_size, t.cfg.hidden_size).to(at::kFloat),
                               specdec::torch::tensor_of(out.layer_hidden[static_cast<std::size_t>(j)]), 1e-2, 1e-2)) << "block " << layers[static_cast<std::size_t>(j)];
  }
  fs::remove_all(dir);
}

// The draft model's answer-row loss (--loss-rows answers): row i predicts token i + 1, so rows 0 .. prompt_length - 2
// predict prompt tokens and their targets do not move it; an answer row's target does.
TEST(Train, DraftLossOnAnswerRowsOnlyIgnoresThePrompt) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("draft-answers");
  const auto recs = make_records(t, dir);
  st::DraftTrainable m(t.cfg, st::tensor_of_values(t.tw.embed_tokens), 16, 2, 2, 1, 32, 1);
  const st::Record& r = recs[0];
  ASSERT_GE(r.prompt_length, 4);
  const auto T = static_cast<std::int64_t>(r.tokens.size());
  auto loss = [&](const st::Record& rec, bool answers_only) {
    torch::NoGradGuard ng;
    return st::draft_loss(m, rec, 640, answers_only);
  };
  const auto all = loss(r, false), ans = loss(r, true);
  EXPECT_EQ(all.rows, T);
  EXPECT_EQ(ans.rows, T - (r.prompt_length - 1));
  const st::Record changed = with_flipped_targets(r, 0, r.prompt_length - 1);
  EXPECT_EQ(loss(changed, true).total.item<double>(), ans.total.item<double>());
  EXPECT_NE(loss(changed, false).total.item<double>(), all.total.item<double>());
  EXPECT_NE(loss(with_flipped_targets(r, r.prompt_length - 1, r.prompt_length), true).total.item<double>(),
            ans.total.item<double>());
  fs::remove_all(dir);
}

TEST(Train, DraftLossDecreasesAndTheCheckpointRoundTrips) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("draft");
  const auto recs = make_records(t, dir);
  st::DraftTrainable m(t.cfg, st::tensor_of_values(t.tw.embed_tokens), 16, 2, 2, 1, 32, 1);
  expect_loss_falls(st::train_draft(m, recs, quick_options(8)), 0.9);

  m.save(dir / "draft");
  auto loaded = specdec::models::load_llama_safetensors(dir / "draft");
  EXPECT_EQ(loaded.config().num_layers, 2);
  EXPECT_TRUE(loaded.config().tie_word_embeddings);
  {
    torch::NoGradGuard ng;
    for (auto& p : m.parameters()) p.copy_(p.to(at::kHalf).to(at::kFloat));
  }
  const auto& r = recs[1];
  std::vector<std::int64_t> ids(r.tokens.begin(), r.tokens.end());
  at::Tensor want;
  {
    torch::NoGradGuard ng;
    want = torch::linear(m.hidden(torch::tensor(ids)), m.embed);
  }
  const auto got = loaded.forward(specdec::models::make_chain_batch(loaded.allocate_sequence(), ids));
  const at::Tensor got_logits = specdec::torch::tensor_of(got.logits);
  EXPECT_TRUE(at::allclose(got_logits, want, 1e-3, 1e-3)) << (got_logits - want).abs().max().item<float>();
  fs::remove_all(dir);
}

// An output vocabulary (--draft-vocab): the loss over the chosen tokens falls, the checkpoint keeps them as its d2t, and
// the loaded model scoring only them (LlamaOptions::output_ids) gives the trainable's logits over those rows.
TEST(Train, DraftWithAnOutputVocabularyTrainsAndRoundTrips) {
  TinyTarget t = make_target();
  const fs::path dir = temp_dir("draft-vocab");
  const auto recs = make_records(t, dir);
  st::DraftTrainable m(t.cfg, st::tensor_of_values(t.tw.embed_tokens), 16, 2, 2, 1, 32, 1);
  const std::int64_t n = t.cfg.vocab_size / 2;
  auto [ids, coverage] = st::frequent_argmax_tokens(recs, t.cfg.vocab_size, n);
  EXPECT_GT(coverage, 0.5);
  m.set_output_vocabulary(ids);
  EXPECT_EQ(m.output_size(), n);
  expect_loss_falls(st::train_draft(m, recs, quick_options(8)), 0.9);
  m.save(dir / "draft");
  std::vector<std::int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(specdec::models::read_output_ids(dir / "draft"), sorted);
  specdec::models::LlamaOptions o;
  o.output_ids = sorted;
  auto loaded = specdec::models::load_llama_safetensors(dir / "draft", o);
  EXPECT_EQ(loaded.output_size(), n);
  {
    torch::NoGradGuard ng;
    for (auto& p : m.parameters()) p.copy_(p.to(at::kHalf).to(at::kFloat));
  }
  std::vector<std::int64_t> toks(recs[1].tokens.begin(), recs[1].tokens.end());
  at::Tensor want;
  {
    torch::NoGradGuard ng;
    want = torch::linear(m.hidden(torch::tensor(toks)), m.output_rows());
  }
  const at::Tensor got =
      specdec::torch::tensor_of(loaded.forward(specdec::models::make_chain_batch(loaded.allocate_sequence(), toks)).logits);
  EXPECT_TRUE(at::allclose(got, want, 1e-3, 1e-3)) << (got - want).abs().max().item<float>();
  // A d2t that maps two draft ids to one token, or of another type: errors naming the tensor.
  for (const auto& bad : {torch::zeros({n}, torch::kLong) - torch::arange(n, torch::kLong), torch::zeros({n})}) {
    auto tensors = m.named();
    tensors.emplace_back("d2t", bad);
    st::write_safetensors_f16(dir / "draft" / "model.safetensors", tensors);
    try {
      (void)specdec::models::read_output_ids(dir / "draft");
      ADD_FAILURE() << "no error";
    } catch (const specdec::error& e) {
      EXPECT_NE(std::string(e.what()).find("d2t"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

// --- the committed checkpoints on the bundled model ------------------------------------------------------------------------

const fs::path kModels = SPECDEC_MODELS_DIR;

template <class Proposer>
std::vector<std::int64_t> greedy(Proposer& p, LlamaModel& target, const std::vector<std::int64_t>& prompt, int g) {
  specdec::decoder::DecoderOptions opt;
  opt.num_speculative_tokens = g;
  opt.calibrate = false;
  specdec::decoder::SpeculativeDecoder<Proposer, LlamaModel> dec(p, target, opt);
  specdec::decoder::GenerationRequest req;
  req.prompt = prompt;
  req.params.temperature = 0;
  req.max_new_tokens = 40;
  const std::vector<specdec::decoder::GenerationRequest> reqs = {req};
  return dec.generate(reqs).at(0).tokens;
}

std::vector<std::int64_t> chat_prompt(const fs::path& gguf, const std::string& text) {
  const specdec::models::GgufFile f(gguf);
  const auto tok = specdec::models::Tokenizer::from_gguf(f);
  const std::vector<specdec::models::ChatMessage> msgs = {{"user", text}};
  const auto ids = tok.encode(specdec::models::ChatTemplate::from_gguf(f).apply(msgs, true), {.add_special = true, .parse_special = true});
  return {ids.begin(), ids.end()};
}

TEST(Train, CommittedDraftsAreLosslessOnSmolLM2) {
  const fs::path gguf = kModels / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << "bundled model not downloaded (scripts/setup.sh)";
  std::vector<fs::path> heads;  // EAGLE-1 and EAGLE-3
  for (const char* name : {"smollm2-135m-eagle", "smollm2-135m-eagle3"})
    if (fs::exists(kModels / name / "config.json")) heads.push_back(kModels / name);
  const bool have_draft = fs::exists(kModels / "smollm2-135m-draft" / "config.json");
  if (heads.empty() && !have_draft) GTEST_SKIP() << "no committed checkpoints";
  auto target = specdec::models::load_llama_gguf(gguf);
  const auto prompt = chat_prompt(gguf, "Give me two tips for learning to cook.");
  specdec::proposers::NoProposer none;
  const auto want = greedy(none, target, prompt, 0);
  ASSERT_FALSE(want.empty());
  const auto tw = specdec::proposers::eagle_target_weights_from_gguf(gguf);
  for (const auto& head_dir : heads) {
    SCOPED_TRACE(head_dir.filename().string());
    EXPECT_LE(fs::file_size(head_dir / "model.safetensors"), 20u * 1000 * 1000);
    specdec::proposers::EagleProposerOptions eo;
    eo.target_num_layers = target.config().num_layers;
    specdec::proposers::EagleProposer eagle(specdec::proposers::load_eagle_head(head_dir, tw), eo);
    EXPECT_EQ(greedy(eagle, target, prompt, 5), want);
  }
  if (have_draft) {
    const auto draft_dir = kModels / "smollm2-135m-draft";
    EXPECT_LE(fs::file_size(draft_dir / "model.safetensors"), 20u * 1000 * 1000);
    specdec::models::LlamaOptions o;
    o.output_ids = specdec::models::read_output_ids(draft_dir);
    auto draft = specdec::models::load_llama_safetensors(draft_dir, o);
    specdec::proposers::DraftModelOptions d;
    d.output_ids = draft.output_ids();
    specdec::proposers::DraftModelProposer<LlamaModel> dp(draft, target.vocab_size(), d);
    EXPECT_EQ(greedy(dp, target, prompt, 5), want);
  }
}

}  // namespace
