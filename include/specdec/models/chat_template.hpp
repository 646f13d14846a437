// Chat templates, written in C++ rather than run as Jinja:
//   ChatML (SmolLM2-Instruct, Qwen and others):
//     <|im_start|>{role}\n{content}<|im_end|>\n ... [<|im_start|>assistant\n]
//   mirroring SmolLM2's tokenizer.chat_template: when the first message is not a system message, a default system message is
//   inserted first; an empty conversation gives only the generation prompt.
//   Gemma (Gemma 1-3, as llama.cpp's built-in "gemma" template writes it):
//     <start_of_turn>user\n{system}\n\n{content}<end_of_turn>\n<start_of_turn>model\n{content}<end_of_turn>\n ...
//     [<start_of_turn>model\n]
//   "assistant" is written "model"; system messages have no turn of their own but go, joined, in front of the next turn that
//   is not the model's; every content is trimmed of ASCII whitespace at both ends. The BOS token is not part of the text:
//   the tokenizer adds it (Gemma's add_bos_token).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/sampling/status.hpp"

namespace specdec::models {

class GgufFile;

enum class ChatTemplateKind : std::uint8_t { kChatML, kGemma };

const char* to_string(ChatTemplateKind kind) noexcept;

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
  /// Gemma's template.
  static ChatTemplate gemma();

  /// Reads tokenizer.chat_template: a Gemma template (uses <start_of_turn>) or a ChatML one (uses <|im_start|> and
  /// <|im_end|>); for ChatML the default system prompt is taken from it ("<|im_start|>system\n...<|im_end|>" inside a
  /// string literal), none when it has no such literal. A file without the key whose vocabulary has <start_of_turn> and
  /// <end_of_turn> (Gemma GGUFs converted without a template) gets Gemma's. Throws specdec::error when the key is missing
  /// otherwise or the template is neither.
  static ChatTemplate from_gguf(const GgufFile& file);
  /// The same from the template's source text (what tokenizer.chat_template holds).
  static ChatTemplate from_template_text(std::string_view jinja_source);

  ChatTemplateKind kind() const noexcept { return kind_; }
  /// ChatML's default system prompt (empty for Gemma, which has none).
  const std::string& default_system_prompt() const noexcept { return default_system_prompt_; }

  /// The prompt text; tokenize it with parse_special = true (and add_special, for the BOS the model asks for).
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  ChatTemplateKind kind_ = ChatTemplateKind::kChatML;
  std::string default_system_prompt_;
};

/// ChatML with SmolLM2's default system prompt.
std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt);

}  // namespace specdec::models
