// Prompt files (specdec-generate --prompt-file): plain lines and JSONL objects (with the proposers a prompt names), and the
// errors for bad lines.
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

TEST(PromptFile, ObjectsMayNameTheirProposers) {
  const auto entries = sm::parse_prompt_entries(
      "plain\n{\"prompt\": \"a\", \"proposers\": [\"suffix\", \"draft\"]}\n{\"prompt\": \"b\", \"proposers\": \"draft,ngram\"}\n"
      "{\"prompt\": \"c\", \"proposers\": []}\n{\"prompt\": \"d\", \"proposers\": \"suffix\"}");
  ASSERT_EQ(entries.size(), 5u);
  EXPECT_EQ(entries[0].prompt, "plain");
  EXPECT_TRUE(entries[0].proposers.empty());
  EXPECT_EQ(entries[1].proposers, (std::vector<std::string>{"suffix", "draft"}));
  EXPECT_EQ(entries[2].proposers, (std::vector<std::string>{"draft", "ngram"}));
  EXPECT_TRUE(entries[3].proposers.empty());
  EXPECT_EQ(entries[4].proposers, (std::vector<std::string>{"suffix"}));
  EXPECT_EQ(sm::parse_prompt_file("{\"prompt\": \"a\", \"proposers\": \"suffix\"}"), (std::vector<std::string>{"a"}));
  auto entries_error = [](std::string_view text) -> std::string {
    try {
      (void)sm::parse_prompt_entries(text, "p.jsonl");
    } catch (const specdec::error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_ERROR_HAS(entries_error("{\"prompt\": \"a\", \"proposers\": 3}"), "line 1: \"proposers\": expected a string");
  EXPECT_ERROR_HAS(entries_error("x\n{\"prompt\": \"a\", \"proposers\": [\"suffix\", 1]}"), "line 2: \"proposers\": expected names");
  EXPECT_ERROR_HAS(entries_error("{\"prompt\": \"a\", \"proposers\": \"suffix,,draft\"}"), "an empty name");
  EXPECT_ERROR_HAS(entries_error("{\"prompt\": \"a\", \"proposers\": \"\"}"), "an empty name");
  EXPECT_ERROR_HAS(entries_error("{\"prompt\": \"a\", \"proposers\": [\"draft\", \"draft\"]}"), "'draft' named twice");
}

TEST(PromptFile, ObjectsMayNameThemselves) {
  const auto entries = sm::parse_prompt_entries("plain\n{\"name\": \"summarise\", \"prompt\": \"a\"}\n{\"prompt\": \"b\"}");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "");
  EXPECT_EQ(entries[1].name, "summarise");
  EXPECT_EQ(entries[2].name, "");
  try {
    (void)sm::parse_prompt_entries("x\n{\"name\": 7, \"prompt\": \"a\"}", "p.jsonl");
    ADD_FAILURE() << "no error for a name that is not a string";
  } catch (const specdec::error& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "prompt file 'p.jsonl': line 2: \"name\": expected a string");
  }
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
  EXPECT_EQ(sm::read_prompt_entries(path).at(1).prompt, "two");
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
