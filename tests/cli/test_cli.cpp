// The command-line programs as a user meets them: specdec-generate and specdec-train are run as processes. Every bad
// flag must exit non-zero at once with one line on stderr that names the flag and the value, and write nothing; flags
// that are ignored must be warned about; a run must print every prompt's text and finish reason, report its progress on
// stderr, and write JSON that conforms to docs/generate.schema.json; docs/cli.md must hold the programs' --help.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "json_schema.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kGenerate = SPECDEC_GENERATE_BIN;
const fs::path kTrain = SPECDEC_TRAIN_BIN;
const fs::path kSourceDir = SPECDEC_SOURCE_DIR;
const fs::path kModel = kSourceDir / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

struct Outcome {
  int rc = -1;
  std::string out, err;
  double seconds = 0;
};

/// A scratch directory per test, removed afterwards; programs run with it as their working directory.
class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("specdec_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "work");
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_ / "work", fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  Outcome run(const fs::path& program, const std::vector<std::string>& args) {
    std::string cmd = "cd " + shell_quote((dir_ / "work").string()) + " && " + shell_quote(program.string());
    for (const auto& a : args) cmd += " " + shell_quote(a);
    cmd += " >" + shell_quote((dir_ / "stdout").string()) + " 2>" + shell_quote((dir_ / "stderr").string()) + " </dev/null";
    const auto t0 = std::chrono::steady_clock::now();
    const int status = std::system(cmd.c_str());
    Outcome o;
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    o.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    o.out = read_file(dir_ / "stdout");
    o.err = read_file(dir_ / "stderr");
    return o;
  }

  /// Files left in the working directory (a refused run must leave none: no output, no .partial).
  std::vector<std::string> leftovers() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "work"))
      if (!e.is_directory()) out.push_back(e.path().lexically_relative(dir_ / "work").string());
    return out;
  }

  /// The program refused the flags: non-zero exit within seconds, nothing on stdout, and exactly one line on stderr
  /// (after any warnings) that holds every needle; no file written.
  void expect_refused(const fs::path& program, const std::vector<std::string>& args,
                      const std::vector<std::string>& needles) {
    std::string shown;
    for (const auto& a : args) shown += " " + a;
    SCOPED_TRACE(program.filename().string() + shown);
    const Outcome o = run(program, args);
    EXPECT_NE(o.rc, 0);
    EXPECT_LT(o.seconds, 20.0) << "refused only after a long run";
    EXPECT_EQ(o.out, "");
    std::vector<std::string> errors;
    for (const auto& line : lines_of(o.err))
      if (line.find("warning:") == std::string::npos) errors.push_back(line);
    ASSERT_EQ(errors.size(), 1u) << o.err;
    for (const auto& n : needles) EXPECT_NE(errors[0].find(n), std::string::npos) << "'" << n << "' not in: " << errors[0];
    EXPECT_EQ(o.err.find("frame #"), std::string::npos) << "a stack trace: " << o.err;
    EXPECT_EQ(o.err.find("Exception raised from"), std::string::npos) << "a stack trace: " << o.err;
    EXPECT_TRUE(leftovers().empty()) << "left behind: " << (leftovers().empty() ? "" : leftovers()[0]);
  }

  fs::path dir_;
};

// The CPUs this process may run on, as the programs count them (the affinity mask).
int cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

TEST_F(Cli, GenerateRefusesEveryBadFlagNamingItBeforeLoadingAnything) {
  const std::string json = "out.json";
  auto refused = [&](std::vector<std::string> args, const std::vector<std::string>& needles) {
    args.push_back("--json");
    args.push_back(json);
    expect_refused(kGenerate, args, needles);
  };
  refused({"-g", "1000"}, {"--num-speculative-tokens", "1000", "[0, 64]"});
  refused({"-g", "-1"}, {"--num-speculative-tokens", "-1", "[0, 64]"});
  refused({"--threads", "100000"}, {"--threads", "100000", "CPU"});
  refused({"--threads", "-2"}, {"--threads", "-2"});
  refused({"--aten-threads", "0"}, {"--aten-threads", "0"});
  refused({"--seed", "-1"}, {"--seed", "'-1'", "2^64"});
  refused({"--seed", "18446744073709551616"}, {"--seed", "18446744073709551616", "2^64"});
  refused({"--seed", "0x10"}, {"--seed", "'0x10'"});
  refused({"--temperature", "-1"}, {"--temperature", "-1", ">= 0"});
  refused({"--top-k", "-3"}, {"--top-k", "-3"});
  refused({"--top-p", "0"}, {"--top-p", "(0, 1]"});
  refused({"--min-p", "2"}, {"--min-p", "2", "[0, 1]"});
  refused({"--max-new-tokens", "0"}, {"--max-new-tokens", "0"});
  refused({"--rounds", "0"}, {"--rounds", "0"});
  refused({"--ngram-min-n", "0"}, {"--ngram-min-n", "0"});
  refused({"--ngram-max-n", "100"}, {"--ngram-max-n", "100"});
  refused({"--suffix-alpha", "0"}, {"--suffix-alpha", "0"});
  refused({"--suffix-min-match", "99"}, {"--suffix-min-match", "99"});
  refused({"--proposer", "bogus"}, {"--proposer", "bogus"});
  refused({"--proposer", "suffix,suffix"}, {"--proposer", "suffix"});
  refused({"--proposer", "suffix,bogus"}, {"--proposer", "bogus"});
  refused({"--proposer", "eagle,suffix,eagle"}, {"--proposer", "eagle"});
  refused({"--verify", "maybe"}, {"--verify", "maybe"});
  refused({"--eagle-sampled-drafts", "maybe"}, {"--eagle-sampled-drafts", "maybe"});
  refused({"--prompt", ""}, {"--prompt", "empty"});
  refused({"--prompt", "ok \xff"}, {"--prompt", "byte offset 3", "UTF-8"});
  refused({"--prompt", "ab\xC3("}, {"--prompt", "byte offset 2"});
  refused({"--dtype", "bfloat16"}, {"--dtype", "--device cpu"});
  refused({"--draft-model", "/nonexistent"}, {"--draft-model", "--proposer suffix"});
  refused({"--eagle-head", "/nonexistent"}, {"--eagle-head", "--proposer suffix"});
  refused({"--corpus-table", "/nonexistent"}, {"--corpus-table", "--proposer suffix"});
  refused({"--proposer", "corpus", "--corpus-table", "/nonexistent/t.bin"}, {"--corpus-table", "/nonexistent/t.bin", "not a file"});
  refused({"--proposer", "suffix,corpus", "--corpus-table", "/nonexistent/t.bin"}, {"--corpus-table", "/nonexistent/t.bin"});
  refused({"--chain-enough", "1", "--proposer", "suffix"}, {"--chain-enough", "--proposer suffix"});
  refused({"--chain-enough", "1", "--proposer", "suffix,eagle"}, {"--chain-enough", "--chain-select first"});
  refused({"--chain-enough", "-1", "--proposer", "suffix,eagle", "--chain-select", "expected"}, {"--chain-enough", "-1"});
  refused({"--baseline-last"}, {"--baseline-last", "--compare"});
  refused({"--device", "bogus:x"}, {"--device", "bogus:x"});
  refused({"--activation-bits", "12"}, {"--activation-bits", "12"});
  refused({"--model", "/nonexistent/model.gguf"}, {"--model", "/nonexistent/model.gguf"});
  refused({"--no-such-flag"}, {"--no-such-flag"});
  std::ofstream(dir_ / "not-a-model.gguf") << "not a GGUF file";
  refused({"--model", (dir_ / "not-a-model.gguf").string()}, {"--model", "not-a-model.gguf"});
  refused({"--prompt-file", "/nonexistent/prompts.txt"}, {"--prompt-file", "/nonexistent/prompts.txt"});
  std::ofstream(dir_ / "not-a-table.bin") << "not a corpus table";
  refused({"--proposer", "corpus", "--corpus-table", (dir_ / "not-a-table.bin").string()},
          {"--corpus-table", "not-a-table.bin", "not a corpus table"});
}

TEST_F(Cli, GenerateChecksTheJsonPathBeforeTheRun) {
  fs::create_directories(dir_ / "work" / "a_directory");
  expect_refused(kGenerate, {"--json", "a_directory"}, {"--json", "a_directory", "is a directory"});
  fs::remove(dir_ / "work" / "a_directory");
  expect_refused(kGenerate, {"--json", "missing/out.json"}, {"--json", "missing", "does not exist"});
  fs::create_directories(dir_ / "work" / "a_directory");
  expect_refused(kGenerate, {"--trace-steps", "a_directory"}, {"--trace-steps", "a_directory", "is a directory"});
  fs::remove(dir_ / "work" / "a_directory");
  expect_refused(kGenerate, {"--trace-steps", "missing/t.jsonl"}, {"--trace-steps", "missing", "does not exist"});
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir_ / "work" / "locked");
    fs::permissions(dir_ / "work" / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    const Outcome o = run(kGenerate, {"--json", "locked/out.json"});
    EXPECT_NE(o.rc, 0);
    EXPECT_NE(o.err.find("--json: the directory 'locked' is not writable"), std::string::npos) << o.err;
    fs::permissions(dir_ / "work" / "locked", fs::perms::owner_all);
  }
}

TEST_F(Cli, GenerateRefusesInvalidUtf8InAPromptFileGivingTheOffset) {
  std::ofstream(dir_ / "prompts.txt", std::ios::binary) << "fine\nbad \xC0\xAF here\n";
  expect_refused(kGenerate, {"--prompt-file", (dir_ / "prompts.txt").string()},
                 {"--prompt-file", "prompt 2", "byte offset 4"});
  std::ofstream(dir_ / "named.jsonl", std::ios::binary) << "{\"prompt\": \"x\", \"proposers\": [\"draft\"]}\n";
  expect_refused(kGenerate, {"--prompt-file", (dir_ / "named.jsonl").string()}, {"--prompt-file", "prompt 1", "draft"});
}

TEST_F(Cli, GenerateWarnsAboutFlagsTheRunWouldIgnore) {
  // The missing model stops each run after the flags were checked, so the warnings show without a model loading.
  struct Case {
    std::vector<std::string> args;
    std::string warning;
  };
  const std::vector<Case> cases = {
      {{"--threads", std::to_string(cpus() + 1)}, "--threads " + std::to_string(cpus() + 1) + ": more threads than"},
      {{"--top-k", "5"}, "--top-k: ignored at temperature 0"},
      {{"--seed", "3"}, "--seed: ignored at temperature 0"},
      {{"--tree-nodes", "4"}, "--tree-nodes: ignored without eagle in --proposer"},
      {{"--ngram-max-n", "3"}, "--ngram-max-n: ignored without ngram"},
      {{"--suffix-alpha", "2", "--proposer", "ngram"}, "--suffix-alpha: ignored without suffix"},
      {{"--fixed-g", "--probe-backoff", "2"}, "--probe-backoff: ignored with --fixed-g"},
      {{"--sampled-cost-slope", "0.2"}, "--sampled-cost-slope: ignored at temperature 0"},
      {{"--expected-acceptance"}, "--expected-acceptance: measures sampled chains"},
  };
  for (const auto& c : cases) {
    auto args = c.args;
    args.insert(args.end(), {"--model", "/nonexistent/model.gguf"});
    SCOPED_TRACE(c.warning);
    const Outcome o = run(kGenerate, args);
    EXPECT_NE(o.rc, 0);
    EXPECT_NE(o.err.find("specdec-generate: warning: " + c.warning), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("--model: '/nonexistent/model.gguf' does not exist"), std::string::npos) << o.err;
  }
  // Flags used as meant give no warning.
  const Outcome o = run(kGenerate, {"--temperature", "0.7", "--top-k", "5", "--seed", "3", "--model", "/nonexistent"});
  EXPECT_EQ(o.err.find("warning"), std::string::npos) << o.err;
}

TEST_F(Cli, TrainRefusesBadFlagsWithoutAStackTraceOrAFile) {
  expect_refused(kTrain, {"--threads", "0", "data", "--out", "set.bin"}, {"--threads", "0"});
  expect_refused(kTrain, {"--threads", "-4", "data", "--out", "set.bin"}, {"--threads", "-4"});
  expect_refused(kTrain, {"data", "--out", "set.bin", "--max-new-tokens", "-1"}, {"--max-new-tokens", "-1"});
  expect_refused(kTrain, {"data", "--out", "set.bin", "--max-new-tokens", "0"}, {"--max-new-tokens", "0"});
  expect_refused(kTrain, {"data", "--out", "set.bin", "--batch", "0"}, {"--batch", "0"});
  expect_refused(kTrain, {"data", "--out", "set.bin", "--greedy-fraction", "1.5"}, {"--greedy-fraction", "1.5"});
  expect_refused(kTrain, {"data", "--out", "set.bin", "--minutes", "0"}, {"--minutes", "0"});
  expect_refused(kTrain, {"data", "--out", "set.bin", "--num-prompts", "0"}, {"--num-prompts", "0"});
  expect_refused(kTrain, {"data", "--out", "missing/set.bin"}, {"--out", "missing", "does not exist"});
  expect_refused(kTrain, {"eagle", "--data", "a.bin", "--out", "head", "--lr", "-1"}, {"--lr", "-1"});
  expect_refused(kTrain, {"eagle", "--data", "a.bin", "--out", "head", "--ttt-steps", "0"}, {"--ttt-steps", "0"});
  expect_refused(kTrain, {"eagle", "--data", "a.bin", "--out", "head", "--eval-every", "5"}, {"--eval-every", "held-out"});
  expect_refused(kTrain, {"eagle", "--data", "a.bin", "--out", "head", "--holdout", "2", "--snapshots", "snaps"},
                 {"--snapshots", "--eval-every"});
  expect_refused(kTrain, {"draft", "--data", "a.bin", "--out", "d", "--heads", "7"}, {"--heads", "7", "divisor"});
  expect_refused(kTrain, {"draft", "--data", "a.bin", "--out", "d", "--tokens-per-step", "0"}, {"--tokens-per-step", "0"});
}

/// The block of docs/cli.md between "<!-- BEGIN <program> --help -->" and "<!-- END ... -->" (without the code fence).
std::string documented_help(const std::string& program) {
  const std::string doc = read_file(kSourceDir / "docs" / "cli.md");
  const std::string begin = "<!-- BEGIN " + program + " --help -->\n```text\n";
  const std::string end = "```\n<!-- END " + program + " --help -->";
  const auto b = doc.find(begin);
  const auto e = doc.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) return "(no --help block for " + program + " in docs/cli.md)";
  return doc.substr(b + begin.size(), e - b - begin.size());
}

TEST_F(Cli, DocsCliHoldsTheProgramsHelp) {
  for (const auto& [program, path] : {std::pair{std::string("specdec-generate"), kGenerate}, {"specdec-train", kTrain}}) {
    const Outcome o = run(path, {"--help"});
    ASSERT_EQ(o.rc, 0) << o.err;
    EXPECT_EQ(documented_help(program), o.out)
        << "docs/cli.md is out of date; regenerate its block with scripts/update-cli-doc.sh";
  }
}

TEST(CliUtil, SeedsAreDecimalsBelowTwoToTheSixtyFour) {
  using specdec::cli::parse_u64;
  EXPECT_EQ(parse_u64("0"), 0u);
  EXPECT_EQ(parse_u64("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(parse_u64("18446744073709551616"));
  EXPECT_FALSE(parse_u64("-1"));
  EXPECT_FALSE(parse_u64("+1"));
  EXPECT_FALSE(parse_u64(""));
  EXPECT_FALSE(parse_u64(" 1"));
  EXPECT_FALSE(parse_u64("1e3"));
  EXPECT_FALSE(parse_u64("99999999999999999999999"));
}

TEST(CliUtil, FirstInvalidUtf8) {
  using specdec::cli::first_invalid_utf8;
  EXPECT_FALSE(first_invalid_utf8(""));
  EXPECT_FALSE(first_invalid_utf8("plain ascii"));
  EXPECT_FALSE(first_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"));  // é € 😀 U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xFF"), 0u);
  EXPECT_EQ(first_invalid_utf8("ab\x80"), 2u);                 // a stray continuation byte
  EXPECT_EQ(first_invalid_utf8("ab\xC3"), 2u);                 // a lead byte at the end
  EXPECT_EQ(first_invalid_utf8("x\xC0\xAF"), 1u);              // overlong '/'
  EXPECT_EQ(first_invalid_utf8("x\xE0\x80\xAF"), 1u);          // overlong, three bytes
  EXPECT_EQ(first_invalid_utf8("xy\xED\xA0\x80"), 2u);         // a surrogate
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);       // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xE2\x82\xAC\xE2\x82"), 3u);  // a truncated second character
}

TEST(CliUtil, Sha256KnownAnswers) {
  auto hex = [](const std::string& s, std::size_t piece) {
    specdec::cli::Sha256 h;
    for (std::size_t i = 0; i < s.size(); i += piece)
      h.update(reinterpret_cast<const unsigned char*>(s.data()) + i, std::min(piece, s.size() - i));
    return h.hex();
  };
  EXPECT_EQ(hex("", 1), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abc", 1), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  for (const std::size_t piece : {1, 7, 64, 1000})
    EXPECT_EQ(hex(two_blocks, piece), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") << piece;
  EXPECT_EQ(hex(std::string(1000000, 'a'), 4096), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(CliUtil, CpuinfoGivesTheFirstProcessorAndTheCount) {
  const std::string two = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                          "model name\t: AMD EPYC 9B14\nflags\t\t: fpu avx512f\n\n"
                          "processor\t: 1\nvendor_id\t: OtherVendor\ncpu family\t: 26\nmodel\t\t: 2\n"
                          "model name\t: Something else\n";
  const auto d = specdec::cli::parse_cpuinfo(two);
  EXPECT_EQ(d.vendor, "AuthenticAMD");
  EXPECT_EQ(d.model_name, "AMD EPYC 9B14");
  EXPECT_EQ(d.family, 25);
  EXPECT_EQ(d.model, 17);
  EXPECT_EQ(d.logical_cpus, 2);
  // Missing or malformed fields keep their defaults; nothing at all gives an empty description.
  const auto odd = specdec::cli::parse_cpuinfo("processor : 0\ncpu family : x25\nno colon here\nmodel : -3\r\n");
  EXPECT_EQ(odd.family, -1);
  EXPECT_EQ(odd.model, -1);
  EXPECT_TRUE(odd.model_name.empty());
  EXPECT_EQ(odd.logical_cpus, 1);
  EXPECT_EQ(specdec::cli::parse_cpuinfo("").logical_cpus, 0);
  // This machine's own: at least one processor where /proc/cpuinfo exists.
  if (std::filesystem::exists("/proc/cpuinfo")) {
    EXPECT_GE(specdec::cli::read_cpu_description().logical_cpus, 1);
  }
}

nlohmann::json load_schema() { return nlohmann::json::parse(read_file(kSourceDir / "docs" / "generate.schema.json")); }

TEST(JsonSchema, CatchesWhatTheSchemaForbids) {
  const specdec::test::JsonSchema schema(load_schema());
  nlohmann::json prompt = {{"index", 0}, {"prompt_tokens", 5}, {"text", "hi"}, {"finish_reason", "length"},
                           {"tokens", 2}, {"seconds", 0.5}};
  nlohmann::json doc = {{"version", "0.1.0"}, {"git_commit", "abc"}, {"model", "m.gguf"}, {"tokenizer", "m.gguf"},
                        {"proposer", "suffix"}, {"num_speculative_tokens", 8}, {"adaptive", true}, {"temperature", 0.0},
                        {"top_k", 0}, {"top_p", 1.0}, {"min_p", 0.0}, {"seed", 0}, {"max_new_tokens", 2}, {"rounds", 1},
                        {"chat", true}, {"threads", 2}, {"aten_threads", 1}, {"device", "cpu"}, {"verify", "token"},
                        {"compare", false}, {"baseline_last", false}, {"prompts", {prompt}},
                        {"speculative", {{"target_forwards", 2}, {"tokens", 2}}}, {"wall_seconds", 1.0}};
  EXPECT_TRUE(schema.validate(doc).empty()) << schema.validate(doc).front();
  auto fails = [&](nlohmann::json bad, const std::string& needle) {
    const auto errors = schema.validate(bad);
    ASSERT_FALSE(errors.empty()) << "accepted: " << needle;
    bool found = false;
    for (const auto& e : errors) found = found || e.find(needle) != std::string::npos;
    EXPECT_TRUE(found) << errors.front();
  };
  auto without = doc;
  without.erase("prompts");
  fails(without, "'prompts' is missing");
  auto extra = doc;
  extra["expected_steps"] = 0;
  fails(extra, "'expected_steps' is not in the schema");
  auto wrong = doc;
  wrong["seed"] = -1;
  fails(wrong, "/seed: expected >= 0");
  wrong = doc;
  wrong["prompts"][0]["finish_reason"] = "done";
  fails(wrong, "/prompts/0/finish_reason");
  wrong = doc;
  wrong["prompts"][0]["text"] = 3;
  fails(wrong, "/prompts/0/text: expected type");
  wrong = doc;
  wrong["model_sha256"] = "xyz";
  fails(wrong, "/model_sha256: expected a string matching");
  wrong = doc;
  wrong["speculative"]["expected_accepted_token"] = nullptr;
  fails(wrong, "/speculative/expected_accepted_token: expected type");
}

/// Runs specdec-generate on the bundled model (skipped without it).
class CliModel : public Cli {
 protected:
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << "the bundled model is absent (./scripts/setup.sh downloads it)";
    Cli::SetUp();
  }
  nlohmann::json json_of(const std::string& name) {
    const std::string text = read_file(dir_ / "work" / name);
    return nlohmann::json::parse(text);
  }
  void expect_conforms(const nlohmann::json& j) {
    const specdec::test::JsonSchema schema(load_schema());
    for (const auto& e : schema.validate(j)) ADD_FAILURE() << "docs/generate.schema.json: " << e;
  }
};

TEST_F(CliModel, DefaultRunPrintsEveryPromptsTextAndWritesJsonThatConformsToTheSchema) {
  const Outcome o = run(kGenerate, {"--max-new-tokens", "4", "--threads", "2", "--json", "run.json"});
  ASSERT_EQ(o.rc, 0) << o.err;
  // Every prompt of the built-in set: its name, text and finish reason on stdout.
  for (const char* header : {"--- prompt 1 (summarise):", "--- prompt 2 (edit-code):", "--- prompt 3 (chat):"})
    EXPECT_NE(o.out.find(header), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[finish reason: length; 4 tokens in "), std::string::npos) << o.out;
  // Progress on stderr: the cost profile round by round, and the generation in tokens.
  EXPECT_NE(o.err.find("cost profile round 4/4 done"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("3/3 prompts, 12 tokens"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("warning"), std::string::npos) << o.err;

  const auto j = json_of("run.json");
  expect_conforms(j);
  ASSERT_EQ(j["prompts"].size(), 3u);
  EXPECT_EQ(j["prompts"][0]["name"], "summarise");
  EXPECT_EQ(j["prompts"][2]["index"], 2);
  EXPECT_EQ(j["prompts"][1]["tokens"], 4);
  EXPECT_EQ(j["prompts"][1]["finish_reason"], "length");
  EXPECT_FALSE(j["prompts"][0]["text"].get<std::string>().empty());
  EXPECT_NE(o.out.find(j["prompts"][2]["text"].get<std::string>()), std::string::npos);  // the text printed is the JSON's
  EXPECT_EQ(j["proposer"], "suffix");
  EXPECT_EQ(j["num_speculative_tokens"], 8);
  EXPECT_EQ(j["threads"], 2);
  ASSERT_TRUE(j.contains("host"));
  EXPECT_GE(j["host"]["logical_cpus"].get<int>(), 1);
  EXPECT_FALSE(j["host"]["kernels"].get<std::string>().empty());
  EXPECT_EQ(j["seed"], 0);
  EXPECT_EQ(j["kv_cache"], "f16");
  EXPECT_TRUE(j.contains("cost_profile"));
  // Only what was measured: no baseline without --compare, no expected acceptance without --expected-acceptance.
  for (const char* absent : {"baseline", "speedup", "outputs_identical", "dtype"}) EXPECT_FALSE(j.contains(absent)) << absent;
  for (const char* absent : {"expected_steps", "expected_accepted_token", "expected_accepted_block"})
    EXPECT_FALSE(j["speculative"].contains(absent)) << absent;
  // The model's digest is the file's SHA-256.
  EXPECT_EQ(j["model_sha256"], specdec::cli::sha256_file(kModel));
  if (std::system("command -v sha256sum >/dev/null 2>&1") == 0) {
    const Outcome s = run("/bin/sh", {"-c", "sha256sum " + shell_quote(kModel.string())});
    EXPECT_EQ(s.out.substr(0, 64), j["model_sha256"].get<std::string>());
  }
  EXPECT_TRUE(leftovers() == std::vector<std::string>{"run.json"});  // no .partial left
}

// An EAGLE head trained for another model (its widths and vocabulary) is refused by name before the model loads.
TEST_F(CliModel, EagleHeadForAnotherModelIsRefusedBeforeTheModelLoads) {
  auto config = nlohmann::json::parse(read_file(kSourceDir / "models" / "smollm2-135m-eagle" / "config.json"));
  config["hidden_size"] = 640;
  config["vocab_size"] = 262144;
  const fs::path head = dir_ / "other_head";  // beside the run's directory, which must stay empty
  fs::create_directories(head);
  std::ofstream(head / "config.json") << config.dump();
  fs::create_symlink(kSourceDir / "models" / "smollm2-135m-eagle" / "model.safetensors",
                     head / "model.safetensors");  // the weights' header is read, not checked
  expect_refused(kGenerate, {"--prompt", "hi", "--proposer", "eagle", "--eagle-head", head.string()},
                 {"--proposer eagle", "other_head", "hidden size 640 and vocabulary 262144", "has 576 and 49152",
                  "--eagle-head"});
  expect_refused(kGenerate, {"--prompt", "hi", "--proposer", "suffix,eagle", "--eagle-head", head.string()},
                 {"--proposer suffix,eagle", "hidden size 640"});
}

// --trace-steps: one JSON line per request and step of the speculative run, adding up to the run's figures.
TEST_F(CliModel, TraceStepsWritesEveryRequestsStepsAsJsonLines) {
  const Outcome o = run(kGenerate, {"--max-new-tokens", "6", "--threads", "2", "--quiet", "--json", "run.json",
                                    "--trace-steps", "steps.jsonl"});
  ASSERT_EQ(o.rc, 0) << o.err;
  const auto j = json_of("run.json");
  std::istringstream lines(read_file(dir_ / "work" / "steps.jsonl"));
  std::string line;
  std::int64_t n = 0, emitted = 0, accepted = 0, verified = 0;
  std::map<std::int64_t, std::int64_t> position;  // by prompt: where its next step drafts
  while (std::getline(lines, line)) {
    const auto e = nlohmann::json::parse(line);
    ++n;
    const std::int64_t prompt = e["prompt"];
    ASSERT_GE(prompt, 0);
    ASSERT_LT(prompt, 3);
    if (position.count(prompt)) {
      EXPECT_EQ(e["position"].get<std::int64_t>(), position[prompt]) << line;
    }
    position[prompt] = e["position"].get<std::int64_t>() + e["emitted"].get<std::int64_t>();
    EXPECT_LE(e["verified"].get<int>(), e["proposed"].get<int>()) << line;
    EXPECT_LE(e["accepted"].get<int>(), e["verified"].get<int>()) << line;
    EXPECT_EQ(e["round"], 0);
    emitted += e["emitted"].get<std::int64_t>();
    accepted += e["accepted"].get<std::int64_t>();
    verified += e["verified"].get<std::int64_t>();
  }
  EXPECT_EQ(n, j["speculative"]["target_forwards"].get<std::int64_t>());
  EXPECT_EQ(emitted, j["speculative"]["tokens"].get<std::int64_t>());
  if (verified > 0) {
    const double rate = j["speculative"]["acceptance_rate"];
    EXPECT_NEAR(rate, static_cast<double>(accepted) / static_cast<double>(verified), 1e-9);
    std::int64_t by_position = 0;
    for (const auto& a : j["speculative"]["accepted_by_position"]) by_position += a.get<std::int64_t>();
    EXPECT_EQ(by_position, accepted);
  }
  EXPECT_EQ(position.size(), 3u);
  EXPECT_NE(o.err.find("wrote steps.jsonl"), std::string::npos) << o.err;
}

// Without --proposer: one request drafts with the suffix,eagle chain (expected selection) where the bundled head fits the
// model, greedy or sampled; a batch (the built-in set above, a prompt file of two) drafts with suffix decoding alone.
TEST_F(CliModel, DefaultProposerIsTheSuffixEagleChainForOneRequestAndSuffixDecodingForBatches) {
  ASSERT_TRUE(fs::exists(kSourceDir / "models" / "smollm2-135m-eagle" / "config.json"));
  const std::vector<std::string> common = {"--prompt", "Name three colours.", "--chat", "--max-new-tokens", "6",
                                           "--threads", "2", "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const Outcome greedy = run(kGenerate, with({"--compare", "--json", "greedy.json"}));
  ASSERT_EQ(greedy.rc, 0) << greedy.err;
  const auto g = json_of("greedy.json");
  expect_conforms(g);
  EXPECT_EQ(g["proposer"], "suffix,eagle");
  EXPECT_EQ(g["outputs_identical"], true);
  EXPECT_NE(greedy.err.find("chain member eagle drafted"), std::string::npos) << greedy.err;
  EXPECT_EQ(greedy.err.find("warning"), std::string::npos) << greedy.err;
  // --chain-select applies to the default chain; first is taken as given.
  const Outcome first = run(kGenerate, with({"--chain-select", "first"}));
  EXPECT_EQ(first.rc, 0) << first.err;

  const Outcome sampled = run(kGenerate, with({"--temperature", "0.7", "--json", "sampled.json"}));
  ASSERT_EQ(sampled.rc, 0) << sampled.err;
  EXPECT_EQ(json_of("sampled.json")["proposer"], "suffix,eagle");
  // Two prompts run as one batch: suffix decoding alone.
  std::ofstream(dir_ / "work" / "two.txt") << "Name three colours.\nName three birds.\n";
  const Outcome batch = run(kGenerate, {"--prompt-file", "two.txt", "--chat", "--max-new-tokens", "4", "--threads", "2",
                                        "--quiet", "--json", "batch.json"});
  ASSERT_EQ(batch.rc, 0) << batch.err;
  EXPECT_EQ(json_of("batch.json")["proposer"], "suffix");
  // --eagle-head's head decides: a copy of the bundled one is chained; one that does not fit the model (another hidden
  // size) leaves the default at suffix decoding, so that --eagle-head is refused as applying to no proposer.
  const fs::path bundled = kSourceDir / "models" / "smollm2-135m-eagle";
  fs::create_directories(dir_ / "head");
  for (const auto& e : fs::directory_iterator(bundled)) fs::copy_file(e.path(), dir_ / "head" / e.path().filename());
  const Outcome copy = run(kGenerate, with({"--json", "copy.json", "--eagle-head", (dir_ / "head").string()}));
  ASSERT_EQ(copy.rc, 0) << copy.err;
  EXPECT_EQ(json_of("copy.json")["proposer"], "suffix,eagle");
  std::string config = read_file(bundled / "config.json");
  const auto at = config.find("\"hidden_size\": 576");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, std::string("\"hidden_size\": 576").size(), "\"hidden_size\": 640");
  std::ofstream(dir_ / "head" / "config.json", std::ios::trunc) << config;
  const Outcome other = run(kGenerate, with({"--json", "other.json", "--eagle-head", (dir_ / "head").string()}));
  EXPECT_NE(other.rc, 0) << "--eagle-head without an eagle proposer must be refused";
  EXPECT_NE(other.err.find("--eagle-head"), std::string::npos) << other.err;
}

TEST_F(CliModel, RawPromptToAnInstructModelIsWarnedAboutAndLongPromptsReportTheirPrefill) {
  std::string long_prompt;
  for (int i = 0; i < 120; ++i) long_prompt += "The quick brown fox jumps over the lazy dog. ";
  const Outcome o = run(kGenerate, {"--prompt", long_prompt, "--max-new-tokens", "2", "-g", "2", "--threads", "2",
                                    "--compare", "--quiet", "--json", "run.json"});
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.err.find("specdec-generate: warning: --prompt without --chat"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("prefill of prompt 1 ("), std::string::npos) << o.err;
  EXPECT_EQ(o.out.find("--- "), std::string::npos) << "--quiet printed text: " << o.out;
  EXPECT_NE(o.out.find("autoregressive"), std::string::npos) << o.out;  // the figures still print
  const auto j = json_of("run.json");
  expect_conforms(j);
  EXPECT_TRUE(j.contains("baseline"));
  EXPECT_TRUE(j.contains("speedup"));
  EXPECT_EQ(j["outputs_identical"], true);
  EXPECT_EQ(j["chat"], false);
  EXPECT_GE(j["prompts"][0]["prompt_tokens"].get<int>(), 512);

  const Outcome chat = run(kGenerate, {"--prompt", "Hi", "--chat", "--max-new-tokens", "1", "-g", "1", "--threads", "2"});
  ASSERT_EQ(chat.rc, 0) << chat.err;
  EXPECT_EQ(chat.err.find("warning"), std::string::npos) << chat.err;
  EXPECT_NE(chat.out.find("[finish reason: "), std::string::npos) << chat.out;  // one prompt: streamed, then its finish
}

}  // namespace
