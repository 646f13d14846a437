// libFuzzer target: the ChatML chat template, both reading a template's source (ChatTemplate::from_template_text: the
// default system prompt) and applying it to arbitrary messages, then tokenizing the prompt with parse_special as the CLI does
// (the bundled model's tokenizer, or a small built-in one when the model is absent).
// Input: one flag byte (bit 0 add_generation_prompt; bits 1-2 which template: the one read from the input's first field, the
// model's own, SmolLM2's default, none), then fields separated by NUL bytes: the template source, then role, content, role,
// content... Any specdec::error is an expected outcome; a crash, a sanitizer report, another exception or a prompt that does
// not hold each message in order is a bug. Run: scripts/fuzz.sh chat_template.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"

namespace sm = specdec::models;
namespace sf = specdec::fuzz;

namespace {
const sf::FuzzVocabulary* g_vocabulary = nullptr;
bool g_compare_text = false;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static const sf::FuzzVocabulary vocabulary = sf::load_fuzz_vocabulary();
  g_vocabulary = &vocabulary;
  g_compare_text = sf::specials_keep_all_bytes(*vocabulary.tokenizer);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string_view> fields;
  for (std::size_t b = 0;;) {
    const std::size_t e = rest.find('\0', b);
    fields.push_back(rest.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }

  std::optional<sm::ChatTemplate> read;
  try {
    read = sm::ChatTemplate::from_template_text(fields[0]);
    SPECDEC_FUZZ_CHECK(fields[0].find(read->default_system_prompt()) != std::string_view::npos);
  } catch (const specdec::error&) {
    SPECDEC_FUZZ_CHECK(fields[0].find("<|im_start|>") == std::string_view::npos ||
                       fields[0].find("<|im_end|>") == std::string_view::npos);
  }
  sm::ChatTemplate chosen("");
  switch ((flags >> 1) & 3) {
    case 0: chosen = read ? *read : sm::ChatTemplate(""); break;
    case 1: chosen = g_vocabulary->chat_template ? *g_vocabulary->chat_template : sm::ChatTemplate(); break;
    case 2: chosen = sm::ChatTemplate(); break;
    default: break;
  }

  std::vector<sm::ChatMessage> messages;
  for (std::size_t i = 1; i + 1 < fields.size(); i += 2) messages.push_back({std::string(fields[i]), std::string(fields[i + 1])});
  const bool generation_prompt = (flags & 1) != 0;
  const std::string prompt = chosen.apply(messages, generation_prompt);

  // Each message appears in order, the generation prompt last.
  std::size_t at = 0;
  for (const auto& m : messages) {
    const std::string turn = "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    at = prompt.find(turn, at);
    SPECDEC_FUZZ_CHECK(at != std::string::npos);
    at += turn.size();
  }
  const std::string_view tail = "<|im_start|>assistant\n";
  if (generation_prompt) SPECDEC_FUZZ_CHECK(prompt.size() >= tail.size() && prompt.ends_with(tail));
  if (messages.empty() && !generation_prompt) SPECDEC_FUZZ_CHECK(prompt.empty());

  // The CLI tokenizes the prompt with parse_special.
  sf::check_round_trip(*g_vocabulary->tokenizer, prompt, {.add_special = true, .parse_special = true}, g_compare_text);
  return 0;
}
