// Prompt files: see include/specdec/models/prompt_file.hpp.
#include "specdec/models/prompt_file.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace specdec::models {

namespace {
[[noreturn]] void fail(const std::string& msg) { throw specdec::error(msg); }

std::vector<std::string> prompts_of(std::vector<PromptEntry> entries) {
  std::vector<std::string> prompts;
  prompts.reserve(entries.size());
  for (auto& e : entries) prompts.push_back(std::move(e.prompt));
  return prompts;
}
}  // namespace

std::vector<PromptEntry> parse_prompt_entries(std::string_view text, std::string_view source) {
  std::vector<PromptEntry> entries;
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
      entries.push_back({std::string(line), {}, {}});
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
    PromptEntry entry{it->get<std::string>(), {}, {}};
    if (const auto n = j.find("name"); n != j.end()) {
      if (!n->is_string())
        fail(fmt::format("prompt file '{}': line {}: \"name\": expected a string", source, number));
      entry.name = n->get<std::string>();
    }
    if (const auto p = j.find("proposers"); p != j.end()) {
      auto bad = [&](const std::string& why) {
        fail(fmt::format("prompt file '{}': line {}: \"proposers\": {}", source, number, why));
      };
      if (p->is_string()) {
        const std::string list = p->get<std::string>();
        for (std::size_t b = 0; b <= list.size();) {
          const std::size_t e = std::min(list.find(',', b), list.size());
          entry.proposers.push_back(list.substr(b, e - b));
          b = e + 1;
        }
      } else if (p->is_array()) {
        for (const auto& name : *p) {
          if (!name.is_string()) bad("expected names (strings)");
          entry.proposers.push_back(name.get<std::string>());
        }
      } else {
        bad("expected a string such as \"suffix,draft\" or an array of names");
      }
      for (std::size_t i = 0; i < entry.proposers.size(); ++i) {
        if (entry.proposers[i].empty()) bad("an empty name");
        for (std::size_t k = 0; k < i; ++k)
          if (entry.proposers[k] == entry.proposers[i]) bad("'" + entry.proposers[i] + "' named twice");
      }
    }
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) fail(fmt::format("prompt file '{}' holds no prompt", source));
  return entries;
}

std::vector<std::string> parse_prompt_file(std::string_view text, std::string_view source) {
  return prompts_of(parse_prompt_entries(text, source));
}

std::vector<PromptEntry> read_prompt_entries(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("prompt file '{}': cannot read it", path.string()));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(fmt::format("prompt file '{}': reading failed", path.string()));
  return parse_prompt_entries(text, path.string());
}

std::vector<std::string> read_prompt_file(const std::filesystem::path& path) { return prompts_of(read_prompt_entries(path)); }

}  // namespace specdec::models
