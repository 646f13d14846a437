// Prompt files (specdec-generate --prompt-file): plain lines and JSONL objects, and the errors for bad lines.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "specdec/models/prompt_file.hpp"

namespace sm = specdec::models;

namespace {
std::string error_of(std::string_view text) {
  try {
    (void)sm::parse_prompt_file(text, "p.jsonl");
  } catch (const specdec::error& e) {
    return e.what();
  }
  return "(no error)";
}
#define EXPECT_ERROR_HAS(s, needle) EXPECT_NE((s).find(needle), std::string::npos) << (s)
}  // namespace

TEST(PromptFile, PlainLinesAndJsonObjects) {
  const auto prompts = sm::parse_prompt_file(
      "first prompt\n\n   \n\t\r\n{\"name\": \"x\", \"prompt\": \"a\\nb \\u00e9\"}\r\n  indented {not json}\nlast\r\n{\"prompt\": \"\"}");
  EXPECT_EQ(prompts, (std::vector<std::string>{"first prompt", "a\nb \xC3\xA9", "  indented {not json}", "last\r", ""}));
}

TEST(PromptFile, ErrorsNameTheSourceAndLine) {
  EXPECT_ERROR_HAS(error_of("ok\n{\"prompt\": 3}\n"), "prompt file 'p.jsonl': line 2: expected a JSON object with a string field");
  EXPECT_ERROR_HAS(error_of("{\"text\": \"x\"}"), "line 1: expected a JSON object with a string field \"prompt\"");
  EXPECT_ERROR_HAS(error_of("\n\n{\"prompt\": \"x\""), "prompt file 'p.jsonl': line 3 is not valid JSON");
  EXPECT_ERROR_HAS(error_of("{} trailing"), "line 1 is not valid JSON");
  EXPECT_ERROR_HAS(error_of(""), "prompt file 'p.jsonl' holds no prompt");
  EXPECT_ERROR_HAS(error_of(" \n\t\r\n"), "holds no prompt");
}

TEST(PromptFile, ReadsAFileAndTheBundledDemoPrompts) {
  const auto path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_prompts.txt");
  std::ofstream(path, std::ios::binary) << "one\n{\"prompt\": \"two\"}\n";
  EXPECT_EQ(sm::read_prompt_file(path), (std::vector<std::string>{"one", "two"}));
  std::filesystem::remove(path);
  try {
    (void)sm::read_prompt_file(path);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const specdec::error& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "cannot read it");
  }
  const auto demo = sm::read_prompt_file(std::filesystem::path(SPECDEC_SOURCE_DIR) / "examples" / "prompts" / "demo.jsonl");
  EXPECT_GE(demo.size(), 3u);
}
