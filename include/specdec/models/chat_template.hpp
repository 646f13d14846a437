// ChatML chat template (SmolLM2-Instruct, Qwen and others):
//   <|im_start|>{role}\n{content}<|im_end|>\n ... [<|im_start|>assistant\n]
// mirroring SmolLM2's tokenizer.chat_template (Jinja): when the first message is not a system message, a default system message
// is inserted first; an empty conversation gives only the generation prompt.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

class GgufFile;

struct ChatMessage {
  std::string role;  ///< "system", "user", "assistant" (any role is written as given)
  std::string content;
};

class ChatTemplate {
 public:
  /// SmolLM2-Instruct's default system prompt.
  static constexpr std::string_view kSmolLM2SystemPrompt = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

  /// ChatML with the given default system prompt (empty: no system message is inserted).
  explicit ChatTemplate(std::string default_system_prompt = std::string(kSmolLM2SystemPrompt))
      : default_system_prompt_(std::move(default_system_prompt)) {}

  /// Reads tokenizer.chat_template: it must be a ChatML template (uses <|im_start|> and <|im_end|>); the default system prompt
  /// is taken from it ("<|im_start|>system\n...<|im_end|>" inside a string literal), none when it has no such literal.
  /// Throws specdec::error when the key is missing or the template is not ChatML.
  static ChatTemplate from_gguf(const GgufFile& file);
  /// The same from the template's source text (what tokenizer.chat_template holds).
  static ChatTemplate from_template_text(std::string_view jinja_source);

  const std::string& default_system_prompt() const noexcept { return default_system_prompt_; }

  /// The prompt text; tokenize it with parse_special = true.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  std::string default_system_prompt_;
};

/// ChatML with SmolLM2's default system prompt.
std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt);

}  // namespace specdec::models
