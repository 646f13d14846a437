// Prompt files (specdec-generate --prompt-file): one prompt per line, or JSONL objects with a string field "prompt". Torch-free.
//
// Lines holding only spaces, tabs and carriage returns are skipped. A line whose first character is '{' must be a JSON object
// with a string field "prompt" (other fields are ignored); any other line is a prompt as it is (a trailing '\r' is kept).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

/// Parses the text of a prompt file; `source` names it in errors. Throws specdec::error naming the source and the line for a
/// line that starts with '{' but is not a JSON object with a string "prompt", and when the text holds no prompt.
std::vector<std::string> parse_prompt_file(std::string_view text, std::string_view source = "<prompts>");

/// Reads and parses the prompt file at `path` (errors name the path).
std::vector<std::string> read_prompt_file(const std::filesystem::path& path);

}  // namespace specdec::models
