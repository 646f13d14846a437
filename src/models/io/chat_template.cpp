// ChatML chat template: see include/specdec/models/chat_template.hpp.
#include "specdec/models/chat_template.hpp"

#include <fmt/format.h>

#include "specdec/models/gguf.hpp"

namespace specdec::models {

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
  return from_template_text(file.get_string("tokenizer.chat_template"));
}

ChatTemplate ChatTemplate::from_template_text(std::string_view t) {
  if (t.find("<|im_start|>") == std::string_view::npos || t.find("<|im_end|>") == std::string_view::npos)
    throw specdec::error(fmt::format("chat template: tokenizer.chat_template is not ChatML (expected <|im_start|> and "
                                     "<|im_end|>), got '{}'",
                                     t.substr(0, 120)));
  // The Jinja source holds the default system message as a literal: '<|im_start|>system\n...<|im_end|>\n'. In the GGUF string
  // the "\n" is a real newline (the converter stores the template text with escapes resolved) or the two characters '\' 'n'.
  std::string prompt;
  for (const std::string_view open : {std::string_view("<|im_start|>system\n"), std::string_view("<|im_start|>system\\n")}) {
    const auto b = t.find(open);
    if (b == std::string_view::npos) continue;
    const auto e = t.find("<|im_end|>", b + open.size());
    if (e == std::string_view::npos) continue;
    prompt = t.substr(b + open.size(), e - b - open.size());
    break;
  }
  return ChatTemplate(std::move(prompt));
}

std::string ChatTemplate::apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && messages[0].role != "system" && !default_system_prompt_.empty())
      out += "<|im_start|>system\n" + default_system_prompt_ + "<|im_end|>\n";
    out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  return ChatTemplate().apply(messages, add_generation_prompt);
}

}  // namespace specdec::models
