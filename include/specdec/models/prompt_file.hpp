// Prompt files (specdec-generate --prompt-file): one prompt per line, or JSONL objects with a string field "prompt". Torch-free.
//
// Lines holding only spaces, tabs and carriage returns are skipped. A line whose first character is '{' must be a JSON object
// with a string field "prompt" (other fields are ignored, but for "name" and "proposers", below); any other line is a prompt
// as it is (a trailing '\r' is kept). An object may name itself with a string "name" (reports and JSON output show it). An object may name the proposers its request drafts with, in its own priority order
// (GenerationRequest::proposers): "proposers": ["suffix", "draft"] or "proposers": "suffix,draft".
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

/// One prompt of a prompt file, the proposers it names (empty: none named) and its name (empty: none given).
struct PromptEntry {
  std::string prompt;
  std::vector<std::string> proposers;
  std::string name;
};

/// Parses the text of a prompt file into its entries; `source` names it in errors. Throws specdec::error naming the source and
/// the line for a line that starts with '{' but is not a JSON object with a string "prompt", for a "proposers" that is not a
/// string or an array of strings, or names an empty or repeated proposer, for a "name" that is not a string, and when the
/// text holds no prompt.
std::vector<PromptEntry> parse_prompt_entries(std::string_view text, std::string_view source = "<prompts>");

/// Reads and parses the prompt file at `path` into its entries (errors name the path).
std::vector<PromptEntry> read_prompt_entries(const std::filesystem::path& path);

/// The prompts of parse_prompt_entries (the same errors).
std::vector<std::string> parse_prompt_file(std::string_view text, std::string_view source = "<prompts>");

/// The prompts of read_prompt_entries.
std::vector<std::string> read_prompt_file(const std::filesystem::path& path);

}  // namespace specdec::models
