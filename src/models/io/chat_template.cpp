// Chat templates (ChatML, Gemma): see include/specdec/models/chat_template.hpp.
#include "specdec/models/chat_template.hpp"

#include <variant>

#include <fmt/format.h>

#include "specdec/models/gguf.hpp"

namespace specdec::models {

namespace {
/// ASCII whitespace trimmed at both ends (what llama.cpp's templates do: isspace in the C locale).
std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}
}  // namespace

const char* to_string(ChatTemplateKind kind) noexcept {
  switch (kind) {
    case ChatTemplateKind::kChatML: return "chatml";
    case ChatTemplateKind::kGemma: return "gemma";
  }
  return "unknown";
}

ChatTemplate ChatTemplate::gemma() {
  ChatTemplate t("");
  t.kind_ = ChatTemplateKind::kGemma;
  return t;
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file) {
  if (!file.contains("tokenizer.chat_template") && file.contains("tokenizer.ggml.tokens")) {
    bool start = false, end = false;
    for (const auto& v : file.get_array("tokenizer.ggml.tokens").elements) {
      const auto* s = std::get_if<std::string>(&v.data);
      if (s == nullptr) break;
      start = start || *s == "<start_of_turn>";
      end = end || *s == "<end_of_turn>";
    }
    if (start && end) return gemma();
  }
  return from_template_text(file.get_string("tokenizer.chat_template"));
}

ChatTemplate ChatTemplate::from_template_text(std::string_view t) {
  if (t.find("<start_of_turn>") != std::string_view::npos) return gemma();
  if (t.find("<|im_start|>") == std::string_view::npos || t.find("<|im_end|>") == std::string_view::npos)
    throw specdec::error(fmt::format("chat template: tokenizer.chat_template is neither ChatML (expected <|im_start|> and "
                                     "<|im_end|>) nor Gemma's (expected <start_of_turn>), got '{}'",
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
  if (kind_ == ChatTemplateKind::kGemma) {
    std::string system;
    for (const auto& m : messages) {
      if (m.role == "system") {
        system += trim(m.content);  // no turn of its own: goes in front of the next turn that is not the model's
        continue;
      }
      const std::string role = m.role == "assistant" ? "model" : m.role;
      out += "<start_of_turn>" + role + "\n";
      if (!system.empty() && role != "model") {
        out += system + "\n\n";
        system.clear();
      }
      out += trim(m.content);
      out += "<end_of_turn>\n";
    }
    if (add_generation_prompt) out += "<start_of_turn>model\n";
    return out;
  }
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
