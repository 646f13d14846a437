// A JSON Schema validator for the subset docs/generate.schema.json uses (draft 2020-12 keywords: type, enum, required,
// properties, additionalProperties, items, minItems, minimum, maximum, exclusiveMinimum, pattern, $ref into #/$defs),
// so tests check the CLI's real output against the documented schema without a Python dependency. A keyword outside
// the subset is itself an error, so the schema can never say more than this checks.
#pragma once

#include <nlohmann/json.hpp>

#include <regex>
#include <set>
#include <string>
#include <vector>

namespace specdec::test {

class JsonSchema {
 public:
  explicit JsonSchema(nlohmann::json schema) : root_(std::move(schema)) {}

  /// Every violation, each as "<JSON pointer>: <what>"; empty when `doc` conforms.
  std::vector<std::string> validate(const nlohmann::json& doc) const {
    std::vector<std::string> errors;
    check(root_, doc, "", errors);
    return errors;
  }

 private:
  static std::string type_of(const nlohmann::json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
  }
  static bool has_type(const nlohmann::json& v, const std::string& t) {
    const std::string actual = type_of(v);
    return actual == t || (t == "number" && actual == "integer");
  }

  void check(const nlohmann::json& schema, const nlohmann::json& v, const std::string& at,
             std::vector<std::string>& errors) const {
    static const std::set<std::string> known = {
        "$schema", "title", "description", "$defs", "$ref", "type", "enum", "required", "properties",
        "additionalProperties", "items", "minItems", "minimum", "maximum", "exclusiveMinimum", "pattern"};
    const std::string where = at.empty() ? "/" : at;
    for (const auto& [key, value] : schema.items())
      if (!known.count(key)) errors.push_back(where + ": the schema uses '" + key + "', which this validator does not know");
    if (const auto r = schema.find("$ref"); r != schema.end()) {
      const std::string ref = r->get<std::string>();
      const std::string prefix = "#/$defs/";
      if (ref.rfind(prefix, 0) != 0 || !root_.contains("$defs") || !root_["$defs"].contains(ref.substr(prefix.size()))) {
        errors.push_back(where + ": unresolvable $ref '" + ref + "'");
        return;
      }
      check(root_["$defs"][ref.substr(prefix.size())], v, at, errors);
    }
    if (const auto t = schema.find("type"); t != schema.end()) {
      bool ok = false;
      if (t->is_string()) ok = has_type(v, t->get<std::string>());
      else
        for (const auto& one : *t) ok = ok || has_type(v, one.get<std::string>());
      if (!ok) {
        errors.push_back(where + ": expected type " + t->dump() + ", got " + type_of(v));
        return;
      }
    }
    if (const auto e = schema.find("enum"); e != schema.end()) {
      bool found = false;
      for (const auto& option : *e) found = found || option == v;
      if (!found) errors.push_back(where + ": expected one of " + e->dump() + ", got " + v.dump());
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (const auto m = schema.find("minimum"); m != schema.end() && x < m->get<double>())
        errors.push_back(where + ": expected >= " + m->dump() + ", got " + v.dump());
      if (const auto m = schema.find("maximum"); m != schema.end() && x > m->get<double>())
        errors.push_back(where + ": expected <= " + m->dump() + ", got " + v.dump());
      if (const auto m = schema.find("exclusiveMinimum"); m != schema.end() && x <= m->get<double>())
        errors.push_back(where + ": expected > " + m->dump() + ", got " + v.dump());
    }
    if (v.is_string())
      if (const auto p = schema.find("pattern"); p != schema.end())
        if (!std::regex_search(v.get<std::string>(), std::regex(p->get<std::string>())))
          errors.push_back(where + ": expected a string matching " + p->dump() + ", got " + v.dump());
    if (v.is_array()) {
      if (const auto m = schema.find("minItems"); m != schema.end() && v.size() < m->get<std::size_t>())
        errors.push_back(where + ": expected at least " + m->dump() + " items, got " + std::to_string(v.size()));
      if (const auto items = schema.find("items"); items != schema.end())
        for (std::size_t i = 0; i < v.size(); ++i) check(*items, v[i], at + "/" + std::to_string(i), errors);
    }
    if (v.is_object()) {
      if (const auto req = schema.find("required"); req != schema.end())
        for (const auto& key : *req)
          if (!v.contains(key.get<std::string>()))
            errors.push_back(where + ": the required property '" + key.get<std::string>() + "' is missing");
      const auto props = schema.find("properties");
      const auto extra = schema.find("additionalProperties");
      for (const auto& [key, value] : v.items()) {
        if (props != schema.end() && props->contains(key)) {
          check((*props)[key], value, at + "/" + key, errors);
        } else if (extra != schema.end()) {
          if (extra->is_boolean()) {
            if (!extra->get<bool>()) errors.push_back(where + ": the property '" + key + "' is not in the schema");
          } else {
            check(*extra, value, at + "/" + key, errors);
          }
        }
      }
    }
  }

  nlohmann::json root_;
};

}  // namespace specdec::test
