// libFuzzer target: the prompt-file parser of specdec-generate --prompt-file (parse_prompt_entries: one prompt per line or
// JSONL objects with a "prompt" field and optional "proposers"). Any specdec::error is an expected outcome; a crash, a
// sanitizer report, another exception, no prompt returned without an error, prompts that are not the input's non-blank
// lines in order, an empty or repeated proposer name, or parse_prompt_file disagreeing is a bug.
// Run: scripts/fuzz.sh prompt_file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "specdec/models/prompt_file.hpp"

namespace sm = specdec::models;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto entries = sm::parse_prompt_entries(text, "fuzz.jsonl");
    SPECDEC_FUZZ_CHECK(!entries.empty());
    std::vector<std::string> prompts;
    for (const auto& e : entries) {
      prompts.push_back(e.prompt);
      for (std::size_t i = 0; i < e.proposers.size(); ++i) {  // named proposers: non-empty and distinct
        SPECDEC_FUZZ_CHECK(!e.proposers[i].empty());
        for (std::size_t k = 0; k < i; ++k) SPECDEC_FUZZ_CHECK(e.proposers[k] != e.proposers[i]);
      }
    }
    SPECDEC_FUZZ_CHECK(sm::parse_prompt_file(text, "fuzz.jsonl") == prompts);
    // One prompt per line that is not blank, in order; a line not starting with '{' is its prompt as it is.
    std::size_t k = 0;
    for (std::size_t b = 0; b < text.size();) {
      std::size_t e = text.find('\n', b);
      if (e == std::string_view::npos) e = text.size();
      const std::string_view line = text.substr(b, e - b);
      b = e + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      SPECDEC_FUZZ_CHECK(k < prompts.size());
      if (line.front() != '{') SPECDEC_FUZZ_CHECK(prompts[k] == line);
      ++k;
    }
    SPECDEC_FUZZ_CHECK(k == prompts.size());
  } catch (const specdec::error&) {
  }
  return 0;
}
