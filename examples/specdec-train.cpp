// specdec-train: trains the drafts of the bundled target on CPU with libtorch.
//
//   specdec-train data   builds a training set: chat prompts made from a corpus (Python sources: docstrings to summarise,
//                        functions to edit; the Debian packages scripts/fetch-corpus.sh installs: documentation, public-
//                        domain texts, quotations, word lists; plus questions the target writes itself) are answered by the
//                        target itself through its chat template (self-distillation) at a mix of temperatures, many
//                        sequences per forward; every token fed to the target keeps its post-norm final hidden state (the
//                        EAGLE-1 feature, EagleFeature::kPostNorm, exactly as the decoder hands it to the proposer) and the
//                        top-k of the target's next-token distribution. --append resumes: prompts already answered in the
//                        output files are skipped.
//   specdec-train fuse   re-runs the target over a training set (one prefill per record) and stores, per token, the outputs
//                        of EAGLE-3's three feature blocks (low, mid, high) in place of the final state.
//   specdec-train eagle  trains an EAGLE-1 head on that set: Smooth-L1 between predicted and true next features plus
//                        0.1 x cross-entropy against the target's distribution (soft labels), AdamW (0.9, 0.95), gradient
//                        clipping 0.5; or, with --version 3 on a fused set, an EAGLE-3 head on the cross-entropy alone.
//                        Both can unroll EAGLE-3's training-time test (--ttt-steps). Saves the checkpoint load_eagle_head
//                        reads (float16 safetensors + config.json).
//   specdec-train draft  distils a small Llama (the target's vocabulary, tied embeddings) with cross-entropy to the target's
//                        top-k distributions, optionally scoring only the tokens the target emits most (--draft-vocab);
//                        saves a Hugging Face directory load_llama_safetensors reads (float16; the output vocabulary as
//                        its d2t tensor, models::read_output_ids).
//
// Both trainers show progress (loss, tokens/s, ETA), write a resumable checkpoint every --checkpoint-every steps and stop at
// --minutes or --epochs. This file is the CLI only: the library (records, corpus prompts, data generation, the trainable
// modules, the training loop) is specdec::train (include/specdec/train/, src/train/), which the tests drive directly.
#include "specdec/train/records.hpp"
#include "specdec/train/corpus.hpp"
#include "specdec/train/data.hpp"
#include "specdec/train/modules.hpp"
#include "specdec/train/trainer.hpp"
#include "specdec/proposers/corpus.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>

#include "cli_util.hpp"
#include "specdec/models/prompt_file.hpp"

namespace {

namespace fs = std::filesystem;
using namespace specdec::train;

#ifndef SPECDEC_SOURCE_DIR
#define SPECDEC_SOURCE_DIR "."
#endif
const fs::path kSourceDir = SPECDEC_SOURCE_DIR;

// The prompts of every examples/prompts/*.jsonl file (training leaves them and near copies of them out).
std::vector<std::string> example_prompt_texts() {
  std::vector<std::string> out;
  const fs::path dir = kSourceDir / "examples" / "prompts";
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".jsonl") continue;
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      if (trim(line).empty()) continue;
      try {
        out.push_back(nlohmann::json::parse(line).at("prompt").get<std::string>());
      } catch (...) {
      }
    }
  }
  return out;
}

// FNV-1a of a prompt's text: which split (training or held out) it belongs to, the same in every sitting.
std::uint64_t text_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

// The default corpus: the Python standard library of the Debian system (/usr/lib/python3.N, the newest N; packages
// libpython3.N-stdlib and -minimal), so every machine of a Debian release reads the same sources; otherwise that of the
// python3 on PATH, found by asking it. Third-party packages (site-packages, dist-packages) are skipped either way.
std::string python_stdlib_dir() {
  std::string best;
  int best_minor = -1;
  if (fs::is_directory("/usr/lib"))
    for (const auto& e : fs::directory_iterator("/usr/lib")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("python3.", 0) != 0 || !fs::exists(e.path() / "os.py")) continue;
      try {
        const int minor = std::stoi(name.substr(8));
        if (minor > best_minor) best_minor = minor, best = e.path().string();
      } catch (...) {
      }
    }
  if (!best.empty()) return best;
  std::string out;
  if (FILE* p = popen("python3 -c \"import sysconfig; print(sysconfig.get_paths()['stdlib'])\" 2>/dev/null", "r")) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  out = trim(out);
  if (out.empty() || !fs::is_directory(out))
    fail("data: --corpus: none given, no /usr/lib/python3.N and no python3 on PATH to take the standard library's sources "
         "from; pass files or directories of Python sources");
  return out;
}

// Validators whose refusals name the flag, the value and the accepted range in one line ("--lr: expected a value > 0,
// got -1"), checked when the arguments are parsed, before any model or data set is read.
CLI::Validator int_range(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        std::size_t used = 0;
        long long x = 0;
        try {
          x = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != v.size() || used == 0 || x < lo || x > hi)
          return fmt::format("expected an integer in [{}, {}], got '{}'", lo, hi, v);
        return {};
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}
CLI::Validator real_range(double lo, double hi, bool open_low) {
  return CLI::Validator(
      [lo, hi, open_low](std::string& v) -> std::string {
        std::size_t used = 0;
        double x = 0;
        try {
          x = std::stod(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != v.size() || used == 0 || !std::isfinite(x) || x > hi || (open_low ? x <= lo : x < lo))
          return fmt::format("expected a value in {}{}, {}], got '{}'", open_low ? "(" : "[", lo, hi, v);
        return {};
      },
      fmt::format("NUMBER in {}{}, {}]", open_low ? "(" : "[", lo, hi));
}
// An output path that can be written: its directory exists and is writable, and it is not a directory (files) or not a
// file (checkpoint directories).
CLI::Validator output_path(bool directory) {
  return CLI::Validator(
      [directory](std::string& v) -> std::string {
        const fs::path path(v);
        std::error_code ec;
        if (directory) {
          if (fs::exists(path, ec) && !fs::is_directory(path, ec)) return "'" + v + "' is a file (a directory is expected)";
          const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
          if (fs::is_directory(path, ec)) return {};
          if (!fs::is_directory(parent, ec)) return "the directory '" + parent.string() + "' does not exist";
          return {};
        }
        return specdec::cli::output_file_problem(path);
      },
      directory ? "DIR" : "FILE");
}

void add_train_flags(CLI::App* app, TrainOptions& t, std::vector<std::string>& data, std::int64_t& records, std::string& out,
                     std::string& ckpt) {
  app->add_option("--data", data, "training set(s) written by `specdec-train data` (several files are concatenated)")->required();
  app->add_option("--records", records, "train on the first N records of the data only (0 = all; a set that grew since)")
      ->capture_default_str()->check(int_range(0, INT64_MAX));
  app->add_option("--out", out, "output checkpoint directory")->required()->check(output_path(true));
  app->add_option("--checkpoint", ckpt, "resumable training state directory (resumes when it exists)")->check(output_path(true));
  app->add_option("--lr", t.lr, "peak learning rate")->capture_default_str()->check(real_range(0, 10, true));
  app->add_option("--warmup", t.warmup_steps, "warm-up steps")->capture_default_str()->check(int_range(0, 1'000'000'000));
  app->add_option("--tokens-per-step", t.tokens_per_step, "rows per optimizer step")
      ->capture_default_str()->check(int_range(1, 1'000'000'000));
  app->add_option("--max-len", t.max_len, "rows per record at most")->capture_default_str()->check(int_range(2, 1'000'000));
  app->add_option("--epochs", t.epochs, "passes over the data at most")->capture_default_str()->check(real_range(0, 1e6, true));
  app->add_option("--minutes", t.minutes, "wall-clock budget")->capture_default_str()->check(real_range(0, 1e6, false));
  app->add_option("--sitting-minutes", t.sitting_minutes,
                  "stop this call after this long, saving --checkpoint, without changing the schedule (0: no limit); "
                  "rerun the same command to continue")
      ->capture_default_str()->check(real_range(0, 1e6, true));
  app->add_flag("--bf16", t.bf16, "matrix products in bfloat16 (autocast, float32 parameters and optimizer)");
  app->add_option("--clip", t.clip, "gradient norm clip")->capture_default_str()->check(real_range(0, 1e6, true));
  app->add_option("--checkpoint-every", t.checkpoint_every, "steps between checkpoints")
      ->capture_default_str()->check(int_range(1, 1'000'000'000));
  app->add_option("--seed", t.seed, "seed")->capture_default_str()->check(int_range(0, INT64_MAX));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"specdec-train: build a training set from the target and train an EAGLE-1 head or a distilled draft model",
               "specdec-train"};
  app.require_subcommand(1);
  std::string model = (kSourceDir / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
  int threads = 2;
  app.add_option("--model", model, "target model (GGUF; default: the bundled models/SmolLM2-135M-Instruct.Q4_1.gguf)");
  const int cpus = std::max(1, specdec::models::available_cpus());
  app.add_option("--threads", threads, "torch intra-op threads (at most 4 per CPU)")
      ->capture_default_str()
      ->check(int_range(1, 4 * cpus).description("INT in [1, 4 per CPU]"));

  auto* data_cmd = app.add_subcommand("data", "run the target over chat prompts made from a corpus; write the training set");
  DataOptions dopt;
  std::string data_out, holdout_out, temperatures;
  std::vector<std::string> corpus;  // empty: the standard library of the python3 on PATH
  std::string package_root = "/";
  bool no_packages = false, append = false, report = false;
  std::size_t num_prompts = 2000;
  double self_instruct = 0.15, holdout_fraction = 0;
  std::int64_t self_instruct_tokens = 64;
  data_cmd->add_option("--out", data_out, "training set file")->required()->check(output_path(false));
  std::string data_prompt_file;
  data_cmd->add_option("--prompt-file", data_prompt_file,
                       "answer these prompts (one per line, or JSONL objects with a \"prompt\"; as specdec-generate reads them) "
                       "instead of prompts made from the corpus; no self-instruct")
      ->check(CLI::ExistingFile);
  data_cmd->add_option("--corpus", corpus,
                       "files or directories of Python sources (default: /usr/lib/python3.N, else the standard library of the "
                       "python3 on PATH)");
  data_cmd->add_option("--package-root", package_root,
                       "where to look for the texts of the Debian packages scripts/fetch-corpus.sh installs")->capture_default_str();
  data_cmd->add_flag("--no-packages", no_packages, "Python sources only (no Debian package texts)");
  data_cmd->add_option("--num-prompts", num_prompts, "prompts to build")->capture_default_str()->check(int_range(1, 100'000'000));
  data_cmd->add_option("--self-instruct", self_instruct,
                       "share of the prompts that are questions the target writes itself from seed topics")
      ->capture_default_str()->check(real_range(0, 1, false));
  data_cmd->add_option("--self-instruct-tokens", self_instruct_tokens, "answer tokens of a self-instruct request at most")
      ->capture_default_str()->check(int_range(1, 65536));
  data_cmd->add_option("--max-new-tokens", dopt.max_new_tokens, "answer tokens per prompt at most")
      ->capture_default_str()->check(int_range(1, 65536));
  data_cmd->add_option("--max-prompt-tokens", dopt.max_prompt_tokens, "longer prompts are skipped")
      ->capture_default_str()->check(int_range(1, 65536));
  data_cmd->add_option("--batch", dopt.batch, "sequences decoded together")->capture_default_str()->check(int_range(1, 4096));
  data_cmd->add_option("--prefill-rows", dopt.prefill_rows, "prompt rows prefilled per forward at most")
      ->capture_default_str()->check(int_range(1, 1 << 20));
  data_cmd->add_option("--top-k", dopt.top_k, "stored entries of the target distribution")
      ->capture_default_str()->check(int_range(1, 4096));
  data_cmd->add_option("--temperatures", temperatures,
                       "temperature mix, e.g. 0:0.4,0.7:0.3,1:0.3 (TEMPERATURE:WEIGHT; 0 = greedy); default: --greedy-fraction");
  data_cmd->add_option("--greedy-fraction", dopt.greedy_fraction, "share of greedy answers (others sampled at T=1) without --temperatures")
      ->capture_default_str()->check(real_range(0, 1, false));
  data_cmd->add_option("--holdout-fraction", holdout_fraction, "share of the prompts (by a hash of their text) written to --holdout-out")
      ->capture_default_str();
  data_cmd->add_option("--holdout-out", holdout_out, "held-out training set file")->check(output_path(false));
  data_cmd->add_option("--minutes", dopt.minutes, "stop starting new prompts after this; the answers under way finish")
      ->capture_default_str()->check(real_range(0, 1e6, true));
  data_cmd->add_option("--seed", dopt.seed, "seed (prompt choice, temperatures and sampling)")
      ->capture_default_str()->check(int_range(0, INT64_MAX));
  data_cmd->add_flag("--append", append, "resume: append to the output files, skipping prompts already answered there");
  data_cmd->add_flag("--report", report, "print the throughput and where the time went at the end");
  bool scan_only = false;
  data_cmd->add_flag("--scan", scan_only, "only count the complete records and tokens in --out (and --holdout-out), then exit");

  auto* fuse_cmd = app.add_subcommand("fuse", "add EAGLE-3's fused features (three target layers) to training sets");
  std::vector<std::string> f_data;
  std::string f_out;
  fuse_cmd->add_option("--data", f_data, "training set(s) written by `specdec-train data`")->required();
  fuse_cmd->add_option("--out", f_out, "output training set with [T, 3 x hidden] features")->required()->check(output_path(false));
  double f_fraction = 1.0;
  fuse_cmd->add_option("--fraction", f_fraction,
                       "fuse this share of the records, spread evenly over the input (the fused features are 3x the size)")
      ->capture_default_str()->check(real_range(0, 1, false));

  auto* corpus_cmd = app.add_subcommand(
      "corpus", "count what the target emits after each short context of training sets: the corpus proposer's table");
  std::vector<std::string> c_data;
  std::string c_out;
  std::int32_t c_max_n = 8;
  std::int64_t c_min_count = 2;
  corpus_cmd->add_option("--data", c_data, "training set(s) written by `specdec-train data`")->required();
  corpus_cmd->add_option("--out", c_out, "the table to write (CorpusTable's file)")->required()->check(output_path(false));
  corpus_cmd->add_option("--max-n", c_max_n, "longest context n-gram counted")
      ->capture_default_str()->check(int_range(1, specdec::proposers::CorpusTable::kMaxN));
  corpus_cmd->add_option("--min-count", c_min_count, "keep n-grams seen at least this many times")
      ->capture_default_str()->check(int_range(1, 65535));
  std::string c_holdout;
  corpus_cmd->add_option("--holdout-data", c_holdout,
                         "also report, on this set's answer positions, how often the proposer's first draft is the "
                         "target's argmax, by the draft's confidence (its calibration)")
      ->check(CLI::ExistingFile);
  std::int64_t c_records = -1;
  corpus_cmd->add_option("--records", c_records, "read only the first N records of the sets, in order (default: all)")
      ->check(int_range(1, INT64_MAX));

  auto* eagle_cmd = app.add_subcommand("eagle", "train an EAGLE head (EAGLE-1, or EAGLE-3 on `fuse`d training sets)");
  TrainOptions eopt;
  std::vector<std::string> e_data;
  std::int64_t e_records = 0;
  std::string e_out, e_ckpt;
  std::int64_t draft_vocab = 0;
  add_train_flags(eagle_cmd, eopt, e_data, e_records, e_out, e_ckpt);
  eagle_cmd->add_option("--noise", eopt.noise, "uniform feature noise amplitude (x feature RMS)")
      ->capture_default_str()->check(real_range(0, 100, false));
  eagle_cmd->add_option("--ce-fraction", eopt.ce_fraction, "share of rows with the cross-entropy term")
      ->capture_default_str()->check(real_range(0, 1, false));
  eagle_cmd->add_option("--ce-weight", eopt.ce_weight,
                        "EAGLE-1: weight of the cross-entropy term beside the feature regression (EAGLE-3 trains on the "
                        "cross-entropy alone)")
      ->capture_default_str()->check(real_range(0, 1000, false));
  eagle_cmd->add_option("--draft-vocab", draft_vocab,
                        "score only the N tokens the target emits most often as its argmax in the data (0 = all)")->capture_default_str();
  eagle_cmd->add_option("--ttt-steps", eopt.ttt_steps, "unrolled draft steps trained per row (training-time test)")
      ->capture_default_str()->check(int_range(1, 64));
  eagle_cmd->add_option("--ttt-weight", eopt.ttt_weight, "loss weight of step k: w^(k-1)")
      ->capture_default_str()->check(real_range(0, 1, true));
  std::string loss_rows = "answers";
  eagle_cmd->add_option("--loss-rows", loss_rows,
                        "rows the loss reads: answers (the rows that predict the answer's tokens, EAGLE's loss mask) or all")
      ->capture_default_str()->check(CLI::IsMember({"answers", "all"}));
  std::string e_init;
  std::int64_t holdout = 0;
  eagle_cmd->add_option("--init", e_init, "start from this saved head (same shape; its draft vocabulary too)");
  int e_version = 1;
  eagle_cmd->add_option("--version", e_version, "1: EAGLE-1 (final hidden state); 3: EAGLE-3 (fused features from `fuse`)")
      ->check(CLI::IsMember({1, 3}))
      ->capture_default_str();
  std::int64_t e_layers = 1;
  eagle_cmd->add_option("--layers", e_layers,
                        "EAGLE-1: decoder layers of the head (with --init from a head of fewer layers, the further ones start as "
                        "the identity)")
      ->capture_default_str()->check(int_range(1, 64));
  eagle_cmd->add_option("--holdout", holdout, "records kept out of training (the last ones): per-step accuracy reported on them")
      ->capture_default_str();
  std::vector<std::string> holdout_data;
  std::int64_t holdout_records = 0;
  std::string snapshots;
  eagle_cmd->add_option("--holdout-data", holdout_data, "held-out set(s) (`data --holdout-out`): per-step accuracy reported on them");
  eagle_cmd->add_option("--holdout-records", holdout_records,
                        "use at most this many held-out records, evenly spaced over the held-out set (0 = all)")
      ->capture_default_str()->check(int_range(0, 1'000'000'000));
  eagle_cmd->add_option("--eval-every", eopt.eval_every,
                        "report the held-out accuracy every N optimizer steps (a learning curve; 0 = before and after only)")
      ->capture_default_str()->check(int_range(0, 1'000'000'000));
  eagle_cmd->add_option("--snapshots", snapshots, "with --eval-every: also save the head at each report, as DIR/rows-<rows seen>")
      ->check(output_path(true));

  auto* draft_cmd = app.add_subcommand("draft", "distil a small draft model on a training set");
  TrainOptions topt;
  topt.lr = 2e-3;
  std::vector<std::string> t_data;
  std::int64_t t_records = 0;
  std::string t_out, t_ckpt;
  std::int64_t hidden = 160, layers = 3, heads = 5, kv_heads = 5, intermediate = 640;
  add_train_flags(draft_cmd, topt, t_data, t_records, t_out, t_ckpt);
  draft_cmd->add_option("--hidden", hidden, "hidden width")->capture_default_str()->check(int_range(1, 65536));
  draft_cmd->add_option("--layers", layers, "decoder layers")->capture_default_str()->check(int_range(1, 1024));
  draft_cmd->add_option("--heads", heads, "attention heads")->capture_default_str()->check(int_range(1, 1024));
  draft_cmd->add_option("--kv-heads", kv_heads, "key/value heads")->capture_default_str()->check(int_range(1, 1024));
  draft_cmd->add_option("--intermediate", intermediate, "MLP width")->capture_default_str()->check(int_range(1, 1 << 20));
  std::string t_loss_rows = "all";
  draft_cmd->add_option("--loss-rows", t_loss_rows,
                        "rows the loss reads: all, or answers (the rows that predict the answer's tokens)")
      ->capture_default_str()->check(CLI::IsMember({"answers", "all"}));
  std::int64_t t_draft_vocab = 0;
  draft_cmd->add_option("--draft-vocab", t_draft_vocab,
                        "score only the N tokens the target emits most often as its argmax in the data (0 = all); the "
                        "checkpoint keeps them as its d2t")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "specdec-train: error: {}\n", e.what());  // one line naming the flag
    return e.get_exit_code() != 0 ? e.get_exit_code() : 1;
  }
  try {
    // Checks that relate two flags, before anything loads.
    if (draft_cmd->parsed()) {
      if (hidden % heads != 0)
        fail(fmt::format("--heads: expected a divisor of --hidden = {}, got {}", hidden, heads));
      if (heads % kv_heads != 0)
        fail(fmt::format("--kv-heads: expected a divisor of --heads = {}, got {}", heads, kv_heads));
    }
    if (eagle_cmd->parsed() && holdout < 0) fail(fmt::format("--holdout: expected an integer >= 0, got {}", holdout));
    if (eagle_cmd->parsed() && eopt.eval_every > 0 && holdout == 0 && holdout_data.empty())
      fail("--eval-every: needs held-out records (--holdout or --holdout-data)");
    if (eagle_cmd->parsed() && !snapshots.empty() && eopt.eval_every == 0) fail("--snapshots: needs --eval-every");
    if (eagle_cmd->parsed() && e_version == 3 && e_layers != 1)
      fail(fmt::format("--layers: EAGLE-3 heads have 1 layer, got {}", e_layers));
    if ((eagle_cmd->parsed() && draft_vocab < 0) || (draft_cmd->parsed() && t_draft_vocab < 0))
      fail(fmt::format("--draft-vocab: expected an integer >= 0 (0 = all), got {}",
                       eagle_cmd->parsed() ? draft_vocab : t_draft_vocab));
    at::set_num_threads(threads);
    if (!fs::exists(model)) fail(fmt::format("--model: '{}' does not exist", model));
    if (data_cmd->parsed() && scan_only) {
      for (const auto& path : {data_out, holdout_out}) {
        if (path.empty()) continue;
        const auto sc = scan_record_file(path, false);
        fmt::print("{}: {} records, {} tokens ({} prompt + {} answer), {} bytes complete of {}\n", path, sc.records, sc.tokens,
                   sc.tokens - sc.answer_tokens, sc.answer_tokens, sc.complete_bytes, fs::file_size(path));
      }
      return 0;
    }
    if (data_cmd->parsed()) {
      const auto t0 = Clock::now();
      if (!temperatures.empty()) dopt.temperatures = parse_temperature_mix(temperatures);
      if (!(holdout_fraction >= 0 && holdout_fraction < 1)) fail(fmt::format("--holdout-fraction: expected in [0, 1), got {}", holdout_fraction));
      if (holdout_fraction > 0 && holdout_out.empty()) fail("--holdout-fraction: needs --holdout-out");
      if (!(self_instruct >= 0 && self_instruct <= 1)) fail(fmt::format("--self-instruct: expected in [0, 1], got {}", self_instruct));
      specdec::models::LlamaOptions lo;
      lo.num_threads = threads;
      lo.initial_cache_slots = dopt.batch + 1;
      lo.initial_cache_capacity = dopt.max_prompt_tokens + std::max(dopt.max_new_tokens, self_instruct_tokens) + 8;
      lo.time_phases = report;
      auto target = specdec::models::load_llama_gguf(model, lo);
      const specdec::models::GgufFile file(model);
      const auto tok = specdec::models::Tokenizer::from_gguf(file);
      const auto tmpl = specdec::models::ChatTemplate::from_gguf(file);
      auto encode = [&](const std::string& t) {
        const std::vector<specdec::models::ChatMessage> msgs = {{"user", t}};
        return tok.encode(tmpl.apply(msgs, true), {.add_special = true, .parse_special = true});
      };
      const std::vector<std::int32_t> stops = tok.end_of_generation_ids();
      Corpus c;
      const PromptExcluder exclude(example_prompt_texts());
      std::vector<std::string> texts;
      std::size_t n_self = 0;
      if (!data_prompt_file.empty()) {
        // The user's prompts, in their order (the examples' prompts are still left out).
        for (auto& t : specdec::models::read_prompt_file(data_prompt_file))
          if (!exclude.excludes(t)) texts.push_back(std::move(t));
        fmt::print("data: {} prompts from {}\n", texts.size(), data_prompt_file);
      } else {
        if (corpus.empty()) corpus = {python_stdlib_dir()};
        std::vector<fs::path> roots(corpus.begin(), corpus.end());
        c = load_corpus(roots);
        fmt::print("data: corpus: {} paragraphs, {} functions from {}\n", c.paragraphs.size(), c.functions.size(), fmt::join(corpus, ", "));
        if (!no_packages)
          for (const auto& [source, n] : load_package_texts(c, package_root)) fmt::print("data: corpus: {} items from {}\n", n, source);
        fmt::print("data: corpus: {} paragraphs, {} functions, {} quotes, {} riddles, {} words, {} topics\n", c.paragraphs.size(),
                   c.functions.size(), c.quotes.size(), c.riddles.size(), c.words.size(), c.topics.size());
        n_self = static_cast<std::size_t>(static_cast<double>(num_prompts) * self_instruct + 0.5);
        texts = make_prompts(c, num_prompts - n_self, dopt.seed, exclude);
      }
      std::fflush(stdout);
      // Resume: the prompts (as tokens) of the records already in the output files.
      std::set<std::vector<std::int32_t>> done;
      if (append)
        for (const auto& path : {data_out, holdout_out})
          if (!path.empty() && fs::exists(path) && fs::file_size(path) > 0) {
            auto scan = scan_record_file(path);
            fmt::print("data: resuming: {} has {} records, {} tokens ({} answer tokens)\n", path, scan.records, scan.tokens,
                       scan.answer_tokens);
            for (auto& p : scan.prompts) done.insert(std::move(p));
          }
      RecordWriter w(data_out, target.hidden_size(), dopt.top_k, append);
      std::optional<RecordWriter> wh;
      if (!holdout_out.empty()) wh.emplace(holdout_out, target.hidden_size(), dopt.top_k, append);
      // A prompt's split: a hash of its text, the same in every sitting.
      const std::uint64_t holdout_cut = static_cast<std::uint64_t>(holdout_fraction * 18446744073709551615.0);
      auto held_out = [&](const std::string& text) { return holdout_fraction > 0 && text_hash(text) < holdout_cut; };
      std::int64_t held_written = 0;
      auto write = [&](bool held, const Record& r) {
        if (held && wh) {
          wh->write(r);
          ++held_written;
        } else {
          w.write(r);
        }
      };
      // Self-instruct: the target writes questions and tasks from seed topics. Its answers to the requests are training
      // records too; the questions are kept beside the output, so a resumed run uses the same ones.
      if (n_self > 0) {
        const fs::path qfile = fs::path(data_out).concat(".questions.txt");
        std::vector<std::string> questions;
        if (append && fs::exists(qfile)) {
          std::ifstream in(qfile);
          for (std::string l; std::getline(in, l);)
            if (!trim(l).empty()) questions.push_back(l);
          fmt::print("data: self-instruct: {} questions read from {}\n", questions.size(), qfile.string());
        } else {
          // About one request in two yields a usable new question.
          const auto requests = self_instruct_requests(c, 2 * n_self + 16, dopt.seed);
          std::vector<std::vector<std::int32_t>> rp;
          std::vector<bool> rskip;
          for (const auto& r : requests) {
            rp.push_back(encode(r));
            rskip.push_back(done.count(rp.back()) > 0);  // answered in an interrupted sitting (its question is lost)
          }
          DataOptions so = dopt;
          so.max_new_tokens = self_instruct_tokens;
          so.temperatures = {{0, 1}, {0.5, 1}};  // distinct topics give distinct questions even greedily
          so.minutes = 1e9;
          fmt::print("data: self-instruct: the target answers {} requests for questions\n", requests.size());
          std::fflush(stdout);
          std::vector<std::string> answers(requests.size());
          const auto sst = generate_records(target, rp, stops, so, [&](std::size_t i, const Record& r) {
            answers[i] = tok.decode(std::vector<std::int32_t>(r.tokens.begin() + r.prompt_length, r.tokens.end()));
            write(held_out(requests[i]), r);
          }, false, rskip);
          std::set<std::string> seen(texts.begin(), texts.end());
          for (const auto& a : answers) {
            if (questions.size() >= n_self) break;
            const auto q = self_instruct_question(a);
            if (q && !exclude.excludes(*q) && seen.insert(*q).second) questions.push_back(*q);
          }
          std::ofstream out(qfile);
          for (const auto& q : questions) out << q << "\n";
          fmt::print("data: self-instruct: {} questions from {} requests ({} prompt + {} answer tokens written in {}), e.g. \"{}\"; "
                     "saved to {}\n",
                     questions.size(), requests.size(), sst.prompt_tokens, sst.answer_tokens, hms(sst.seconds),
                     questions.empty() ? "" : questions.front(), qfile.string());
        }
        texts.insert(texts.end(), questions.begin(), questions.end());
        std::mt19937_64 shuffle_rng(dopt.seed ^ 0x9e3779b97f4a7c15ull);
        std::shuffle(texts.begin(), texts.end(), shuffle_rng);
      }
      std::vector<std::vector<std::int32_t>> prompts;
      for (const auto& t : texts) prompts.push_back(encode(t));
      std::vector<char> held(texts.size(), 0);
      for (std::size_t i = 0; i < texts.size(); ++i) held[i] = held_out(texts[i]);
      std::vector<bool> skip(prompts.size(), false);
      for (std::size_t i = 0; i < prompts.size(); ++i) skip[i] = done.count(prompts[i]) > 0;
      const auto done_before = std::count(skip.begin(), skip.end(), true);
      fmt::print("data: {} prompts ({} done before, {} held out), e.g. \"{}\"; batch {}, up to {} answer tokens, {} min\n", prompts.size(),
                 done_before, std::count(held.begin(), held.end(), 1), texts.empty() ? "" : texts.front().substr(0, 60), dopt.batch,
                 dopt.max_new_tokens, dopt.minutes);
      std::fflush(stdout);
      const auto st = generate_records(target, prompts, stops, dopt, [&](std::size_t i, const Record& r) { write(held[i] != 0, r); },
                                       true, skip);
      fmt::print("data: done: {} records ({} held out), {} prompt + {} answer tokens in {} ({} incl. loading); {} prompts skipped (longer than {} tokens)\n",
                 st.records, held_written, st.prompt_tokens, st.answer_tokens, hms(st.seconds), hms(seconds_since(t0)), st.skipped,
                 dopt.max_prompt_tokens);
      if (report) {
        const double tt = static_cast<double>(st.target_tokens());
        fmt::print("data: report: {} threads, batch {}: {:.0f} target tokens/s, {:.0f} answer tokens/s over {:.1f} s wall; "
                   "{:.0f} target tokens per CPU-second ({:.1f} CPU-s); {} forwards, {:.1f} rows each; time: forward {:.1f} s, "
                   "rows (top-k, sampling, features) {:.1f} s, records {:.1f} s\n",
                   threads, dopt.batch, tt / st.seconds, static_cast<double>(st.answer_tokens) / st.seconds, st.seconds,
                   tt / std::max(st.cpu_seconds, 1e-9), st.cpu_seconds, st.forwards, tt / static_cast<double>(std::max<std::int64_t>(st.forwards, 1)),
                   st.forward_seconds, st.rows_seconds, st.write_seconds);
        const auto& ph = target.phase_times();
        std::string phases;
        for (int i = 0; i < specdec::models::ForwardPhaseTimes::kCount; ++i)
          phases += fmt::format(" {} {:.1f}", specdec::models::ForwardPhaseTimes::kNames[i], ph.seconds[i]);
        fmt::print("data: report: the {} decode-only forwards (s):{}\n", ph.forwards, phases);
      }
      return 0;
    }
    if (fuse_cmd->parsed()) {
      std::int64_t H = 0;
      auto data = read_record_files(f_data, &H);
      if (f_fraction < 1.0) {  // record i is kept when floor(i * f) steps: an even spread
        std::vector<Record> kept;
        for (std::size_t i = 0; i < data.size(); ++i)
          if (std::floor(static_cast<double>(i + 1) * f_fraction) > std::floor(static_cast<double>(i) * f_fraction))
            kept.push_back(std::move(data[i]));
        data = std::move(kept);
      }
      std::int64_t longest = 0;
      for (const auto& r : data) longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(r.tokens.size()));
      specdec::models::LlamaOptions lo;
      lo.num_threads = threads;
      lo.initial_cache_capacity = longest + 8;
      auto target = specdec::models::load_llama_gguf(model, lo);
      if (H != target.hidden_size())
        fail(fmt::format("--data: features of width {}, expected the target's final hidden state ({})", H, target.hidden_size()));
      const auto layers = specdec::proposers::eagle3_default_feature_layers(target.config().num_layers);
      fmt::print("fuse: {} records; features = outputs of target blocks {}\n", data.size(), fmt::join(layers, ", "));
      const fs::path tmp = fs::path(f_out).concat(".partial");
      {
        RecordWriter w(tmp, 3 * target.hidden_size(), data.empty() ? 0 : data.front().topk_ids.size(1), false);
        fuse_records(target, data, layers, w, true);
      }
      fs::rename(tmp, f_out);  // all or nothing
      return 0;
    }
    if (corpus_cmd->parsed()) {
      // Every answer position of every record: the context n-grams ending there and the target's argmax after them.
      const auto vocab = specdec::models::llama_config_from_gguf(specdec::models::GgufFile(model)).vocab_size;
      for (const auto& path : c_data) (void)scan_record_file(path, false);  // every file readable before the long part
      const auto t0 = Clock::now();
      specdec::proposers::CorpusTableBuilder builder(vocab, c_max_n);
      std::int64_t records = 0;
      std::vector<std::int64_t> tokens, next;
      for (const auto& path : c_data)
        records += for_each_record_tokens(path, [&](std::span<const std::int32_t> t, std::int32_t prompt_length,
                                                     std::span<const std::int32_t> argmax) {
          // Positions from the prompt's last token (which predicts the answer's first) to the last but one (after the
          // record's final token, often the end of turn, nothing was emitted).
          const auto T = static_cast<std::int64_t>(t.size());
          const std::int64_t first = std::max<std::int64_t>(prompt_length - 1, 0);
          if (T - 1 <= first) return;
          tokens.assign(t.begin(), t.end() - 1);
          next.assign(argmax.begin() + first, argmax.end() - 1);
          builder.add(tokens, next, first);
        }, c_records < 0 ? -1 : std::max<std::int64_t>(c_records - records, 0));
      const auto table = std::make_shared<const specdec::proposers::CorpusTable>(
          std::move(builder).finish(static_cast<std::uint32_t>(c_min_count)));
      if (!c_holdout.empty()) {
        // The default proposer's first draft at every held-out answer position, binned by its confidence.
        const specdec::proposers::CorpusProposer proposer(table);
        constexpr int kBins = 10;
        std::int64_t positions = 0, drafted[kBins] = {}, right[kBins] = {};
        double conf_sum[kBins] = {};
        std::vector<std::int64_t> drafts;
        std::vector<float> confidence;
        for_each_record_tokens(c_holdout, [&](std::span<const std::int32_t> t, std::int32_t prompt_length,
                                              std::span<const std::int32_t> argmax) {
          tokens.assign(t.begin(), t.end());
          for (std::int64_t i = std::max<std::int64_t>(prompt_length - 1, 0); i + 1 < static_cast<std::int64_t>(t.size()); ++i) {
            ++positions;
            proposer.draft(std::span(tokens).first(static_cast<std::size_t>(i + 1)), 1, drafts, confidence);
            if (drafts.empty()) continue;
            const int b = std::min(kBins - 1, static_cast<int>(confidence[0] * kBins));
            ++drafted[b];
            conf_sum[b] += confidence[0];
            right[b] += drafts[0] == argmax[static_cast<std::size_t>(i)];
          }
        });
        std::int64_t all_drafted = 0, all_right = 0;
        fmt::print("corpus: calibration on {} held-out answer positions (first draft; confidence bin: drafts, mean "
                   "confidence, the target's argmax)\n", positions);
        for (int b = 0; b < kBins; ++b) {
          all_drafted += drafted[b];
          all_right += right[b];
          if (drafted[b] == 0) continue;
          fmt::print("corpus:   [{:.1f}, {:.1f}): {:7d}  {:.3f}  {:.3f}\n", b / 10.0, (b + 1) / 10.0, drafted[b],
                     conf_sum[b] / static_cast<double>(drafted[b]),
                     static_cast<double>(right[b]) / static_cast<double>(drafted[b]));
        }
        fmt::print("corpus: drafts at {:.3f} of positions, the argmax at {:.3f} of them\n",
                   static_cast<double>(all_drafted) / static_cast<double>(std::max<std::int64_t>(positions, 1)),
                   static_cast<double>(all_right) / static_cast<double>(std::max<std::int64_t>(all_drafted, 1)));
      }
      table->save(c_out);
      fmt::print("corpus: {} records, {} answer positions, {} n-grams (n <= {}, seen >= {} times), {:.1f} MB, {:.1f} s\n",
                 records, table->positions(), table->num_entries(), c_max_n, c_min_count,
                 static_cast<double>(fs::file_size(c_out)) / 1e6, seconds_since(t0));
      return 0;
    }
    const auto tw = specdec::proposers::eagle_target_weights_from_gguf(model);
    const specdec::models::GgufFile file(model);
    auto target_cfg = specdec::models::llama_config_from_gguf(file);
    // The heads and drafts are trained as Llama blocks on the target's embeddings, features and output projection: a
    // target whose block has other options (qwen2, qwen3, gemma3) is refused until the trainers take them.
    if (const auto extra = specdec::models::block_options_beyond_llama(target_cfg); !extra.empty()) {
      std::string list;
      for (const auto& e : extra) list += (list.empty() ? "" : ", ") + e;
      fail(fmt::format("--model: '{}' has {}, which the trainers' Llama-block heads and drafts do not take yet",
                       target_cfg.architecture, list));
    }
    if (target_cfg.num_kv_heads == 0) target_cfg.num_kv_heads = target_cfg.num_heads;
    if (target_cfg.head_dim == 0) target_cfg.head_dim = target_cfg.hidden_size / target_cfg.num_heads;
    if (eagle_cmd->parsed()) {
      std::int64_t H = 0;
      auto data = read_record_files(e_data, &H, e_records > 0 ? e_records : -1);
      if (holdout < 0 || holdout >= static_cast<std::int64_t>(data.size()))
        fail(fmt::format("--holdout: expected in [0, {}), got {}", data.size(), holdout));
      std::vector<Record> held(std::make_move_iterator(data.end() - holdout), std::make_move_iterator(data.end()));
      data.resize(data.size() - static_cast<std::size_t>(holdout));
      if (!holdout_data.empty()) {
        std::int64_t HH = 0;
        auto more = read_record_files(holdout_data, &HH);
        if (HH != H) fail(fmt::format("--holdout-data: features of width {}, the training set's are {}", HH, H));
        held.insert(held.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
      }
      if (holdout_records > 0 && static_cast<std::int64_t>(held.size()) > holdout_records) {
        // Evenly spaced: a set written in stages (self-instruct answers first) is represented by all of them.
        std::vector<Record> spaced;
        for (std::int64_t i = 0; i < holdout_records; ++i)
          spaced.push_back(std::move(held[static_cast<std::size_t>(i * static_cast<std::int64_t>(held.size()) / holdout_records)]));
        held = std::move(spaced);
      }
      eopt.answers_only = loss_rows == "answers";
      const auto version = e_version == 3 ? specdec::proposers::EagleVersion::kEagle3 : specdec::proposers::EagleVersion::kEagle1;
      const std::int64_t want_h = (e_version == 3 ? 3 : 1) * target_cfg.hidden_size;
      if (H != want_h)
        fail(fmt::format("--data: features of width {}, EAGLE-{} expects {}{}", H, e_version, want_h,
                         e_version == 3 ? " (three layers: run `specdec-train fuse` on the training set first)" : ""));
      std::int64_t rows = 0;
      for (auto& r : data) rows += static_cast<std::int64_t>(r.tokens.size());
      fmt::print("eagle: {} records, {} tokens\n", data.size(), rows);
      if (eopt.ttt_steps < 1) fail(fmt::format("--ttt-steps: expected >= 1, got {}", eopt.ttt_steps));
      if (draft_vocab < 0 || draft_vocab > target_cfg.vocab_size)
        fail(fmt::format("--draft-vocab: expected in [0, {}], got {}", target_cfg.vocab_size, draft_vocab));
      eopt.checkpoint = e_ckpt;
      EagleTrainable m(target_cfg, tw, eopt.seed, version, e_layers);
      if (m.eagle3() && e_init.empty()) {
        // EAGLE-3's final norm starts as the target's: with fc passing the high feature through, its logits start at the
        // scale of the target's own.
        const auto* info = file.find_tensor("output_norm.weight");
        if (!info || info->shape != std::vector<std::int64_t>{target_cfg.hidden_size})
          fail(fmt::format("--model: '{}' has no output_norm.weight of shape [{}]", model, target_cfg.hidden_size));
        torch::NoGradGuard ng;
        file.dequantize(*info, std::span<float>(m.final_norm.data_ptr<float>(), static_cast<std::size_t>(m.final_norm.numel())));
      }
      if (!e_init.empty()) {
        m.load_from(e_init, tw);
        fmt::print("eagle: initialised from '{}' (draft vocabulary {})\n", e_init, m.draft_vocab());
      } else if (draft_vocab > 0 && draft_vocab < target_cfg.vocab_size) {
        auto [ids, coverage] = frequent_argmax_tokens(data, target_cfg.vocab_size, draft_vocab);
        m.set_draft_vocabulary(ids);
        fmt::print("eagle: draft vocabulary of {} tokens covers {:.2f}% of the target's argmax tokens in the data\n", draft_vocab,
                   100 * coverage);
      }
      auto report = [&](const std::string& when) {
        if (held.empty()) return;
        const int k = std::max(eopt.ttt_steps, 3);
        const auto all = eagle_step_accuracy(m, held, k, eopt.max_len, false);
        const auto ans = eagle_step_accuracy(m, held, k, eopt.max_len, true);
        // Greedy chain of 4 drafts with these conditional acceptance rates (the last one for the later drafts).
        double tau = 1, run = 1;
        for (int j = 0; j < 4; ++j) tau += (run *= ans[static_cast<std::size_t>(std::min(j, k - 1))]);
        fmt::print("eagle: held-out ({} records) accuracy by draft step {}: all rows {:.3f}, answer rows {:.3f}; chain of 4 tau {:.2f}\n",
                   held.size(), when, fmt::join(all, " "), fmt::join(ans, " "), tau);
        std::fflush(stdout);
      };
      eopt.on_eval = [&](std::int64_t step, std::int64_t rows_seen) {
        report(fmt::format("at step {} ({} rows)", step, rows_seen));
        if (!snapshots.empty()) m.save(fs::path(snapshots) / fmt::format("rows-{:09d}", rows_seen), tw);
      };
      report("before");
      const auto res = eopt.minutes > 0 ? train_eagle(m, data, eopt) : TrainResult{};
      report("after");
      if (!held.empty()) {
        // Calibration of the answer rows: is the head's confidence the chance its draft is the target's argmax?
        const auto st = eagle_step_stats(m, held, std::max(eopt.ttt_steps, 3), eopt.max_len, true, 10);
        for (std::size_t k = 0; k < st.bin_rows.size(); ++k) {
          std::string line;
          for (std::size_t b = 0; b < st.bin_rows[k].size(); ++b)
            if (st.bin_rows[k][b] > 0)
              line += fmt::format(" [{:.1f},{:.1f}): {:.0f} rows, mean confidence {:.3f}, accepted {:.3f};", 0.1 * static_cast<double>(b),
                                  0.1 * static_cast<double>(b + 1), st.bin_rows[k][b], st.bin_confidence[k][b] / st.bin_rows[k][b],
                                  st.bin_hits[k][b] / st.bin_rows[k][b]);
          fmt::print("eagle: held-out calibration, step {}:{}\n", k + 1, line);
        }
        const std::vector<double> temperatures{0.7, 1.0}, scales{1.0, 0.8, 0.65, 0.5};
        const auto overlaps = specdec::train::eagle_sampled_overlap(m, held, eopt.max_len, true, temperatures, scales);
        for (std::size_t t = 0; t < temperatures.size(); ++t)
          fmt::print("eagle: held-out sampled first drafts at temperature {}: {:.0f} rows, acceptance {:.3f}; head top probability "
                     "at {} x T: {:.3f}\n", temperatures[t], overlaps[t].rows, overlaps[t].mean_overlap, fmt::join(scales, " / "),
                     fmt::join(overlaps[t].mean_top, " / "));
      }
      m.save(e_out, tw);
      auto loaded = specdec::proposers::load_eagle_head(e_out, tw);
      fmt::print("eagle: done: {} steps, {} rows in {}; loss {:.4f} -> {:.4f}, top1 {:.3f}; saved {} ({} bytes)\n", res.steps,
                 res.rows, hms(res.seconds), res.first_loss, res.last_loss, res.last_top1, e_out,
                 fs::file_size(fs::path(e_out) / "model.safetensors"));
      (void)loaded;
      if (!res.finished) fmt::print("eagle: the sitting ended before the schedule; rerun the same command to continue from its --checkpoint\n");
      return 0;
    }
    if (draft_cmd->parsed()) {
      if (t_draft_vocab > target_cfg.vocab_size)  // before the records are read
        fail(fmt::format("--draft-vocab: expected in [0, {}], got {}", target_cfg.vocab_size, t_draft_vocab));
      const auto data = read_record_files(t_data, nullptr, t_records > 0 ? t_records : -1);
      std::int64_t rows = 0;
      for (auto& r : data) rows += static_cast<std::int64_t>(r.tokens.size());
      fmt::print("draft: {} records, {} tokens; hidden {}, {} layers, {} heads ({} kv), MLP {}\n", data.size(), rows, hidden, layers,
                 heads, kv_heads, intermediate);
      topt.checkpoint = t_ckpt;
      DraftTrainable m(target_cfg, specdec::train::tensor_of_values(tw.embed_tokens), hidden, layers, heads, kv_heads, intermediate, topt.seed);
      if (t_draft_vocab > 0 && t_draft_vocab < target_cfg.vocab_size) {
        auto [ids, coverage] = frequent_argmax_tokens(data, target_cfg.vocab_size, t_draft_vocab);
        m.set_output_vocabulary(ids);
        fmt::print("draft: output vocabulary of {} tokens covers {:.2f}% of the target's argmax tokens in the data\n",
                   t_draft_vocab, 100 * coverage);
      }
      topt.answers_only = t_loss_rows == "answers";
      const auto res = train_draft(m, data, topt);
      m.save(t_out);
      specdec::models::LlamaOptions check;  // the saved model loads, with its output vocabulary
      check.output_ids = specdec::models::read_output_ids(t_out);
      auto loaded = specdec::models::load_llama_safetensors(t_out, check);
      fmt::print("draft: done: {} steps, {} rows in {}; loss {:.4f} -> {:.4f}, top1 {:.3f}; saved {} ({} bytes)\n", res.steps, res.rows,
                 hms(res.seconds), res.first_loss, res.last_loss, res.last_top1, t_out,
                 fs::file_size(fs::path(t_out) / "model.safetensors"));
      (void)loaded;
      if (!res.finished) fmt::print("draft: the sitting ended before the schedule; rerun the same command to continue from its --checkpoint\n");
      return 0;
    }
  } catch (const c10::Error& e) {
    fmt::print(stderr, "specdec-train: error: {}\n", e.what_without_backtrace());  // no C++ stack trace
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "specdec-train: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
