// Internal to specdec::model_io: how error messages quote a JSON value they reject.
#pragma once

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace specdec::models::detail {

/// A scalar as JSON text (a long string cut at 80 characters); an array or object by its kind and size only. nlohmann's dump()
/// recurses once per nesting level, so dumping a rejected value from an untrusted file (`[[[[...]]]]` 100k levels deep) would
/// overflow the stack.
inline std::string json_excerpt(const nlohmann::json& value) {
  if (value.is_array()) return fmt::format("an array of {} values", value.size());
  if (value.is_object()) return fmt::format("an object of {} keys", value.size());
  if (value.is_string() && value.get_ref<const std::string&>().size() > 80) {
    const auto& s = value.get_ref<const std::string&>();
    return nlohmann::json(s.substr(0, 80)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "...";
  }
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace specdec::models::detail
