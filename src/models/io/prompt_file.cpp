// Prompt files: see include/specdec/models/prompt_file.hpp.
#include "specdec/models/prompt_file.hpp"

#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace specdec::models {

namespace {
[[noreturn]] void fail(const std::string& msg) { throw specdec::error(msg); }
}  // namespace

std::vector<std::string> parse_prompt_file(std::string_view text, std::string_view source) {
  std::vector<std::string> prompts;
  std::size_t number = 0;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (line.front() != '{') {
      prompts.emplace_back(line);
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(fmt::format("prompt file '{}': line {} is not valid JSON: {}", source, number, e.what()));
    }
    const auto it = j.is_object() ? j.find("prompt") : j.end();
    if (!j.is_object() || it == j.end() || !it->is_string())
      fail(fmt::format("prompt file '{}': line {}: expected a JSON object with a string field \"prompt\"", source, number));
    prompts.push_back(it->get<std::string>());
  }
  if (prompts.empty()) fail(fmt::format("prompt file '{}' holds no prompt", source));
  return prompts;
}

std::vector<std::string> read_prompt_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("prompt file '{}': cannot read it", path.string()));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(fmt::format("prompt file '{}': reading failed", path.string()));
  return parse_prompt_file(text, path.string());
}

}  // namespace specdec::models
