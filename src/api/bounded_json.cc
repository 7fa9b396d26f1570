#include "api/bounded_json.h"

#include <fmt/format.h>

#include "core/text.h"

namespace gpuslice::api {

int JsonDepth(std::string_view text, int stop_above) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is, cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_above) return deepest;
        }
        break;
      case ']':
      case '}':
        // Unbalanced closers are the parser's to reject; the depth never goes below 0.
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return deepest;
}

Result<nlohmann::json> ParseBoundedJson(std::string_view text, std::string_view what,
                                        const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return InvalidArgument(fmt::format("{}: {} bytes of JSON, at most {} are accepted", what,
                                       text.size(), limits.max_bytes));
  }
  if (JsonDepth(text, limits.max_depth) > limits.max_depth) {
    return InvalidArgument(fmt::format("{}: JSON nested deeper than {} levels (arrays and objects "
                                       "inside one another); refused before parsing",
                                       what, limits.max_depth));
  }
  // The depth is bounded now, so every recursive walk of the tree (parse callbacks, dump(),
  // comparison, destruction) is bounded too.
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(fmt::format("{}: not valid JSON", what));
  return j;
}

std::string ShownText(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return EscapeInvalidUtf8(s);
  std::size_t cut = max_bytes;
  // Do not split a UTF-8 sequence: back up over continuation bytes.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return fmt::format("{}... ({} bytes)", EscapeInvalidUtf8(s.substr(0, cut)), s.size());
}

std::string ShownJson(const nlohmann::json& v, std::size_t max_bytes) {
  switch (v.type()) {
    case nlohmann::json::value_t::string:
      // Quoted, as JSON writes it, so a string is told from a number ("3" from 3).
      return "\"" + ShownText(v.get_ref<const std::string&>(), max_bytes) + "\"";
    case nlohmann::json::value_t::array:
      return fmt::format("an array of {} element{}", v.size(), v.size() == 1 ? "" : "s");
    case nlohmann::json::value_t::object:
      return fmt::format("an object of {} field{}", v.size(), v.size() == 1 ? "" : "s");
    case nlohmann::json::value_t::discarded:
      return "invalid JSON";
    default:
      // Numbers, booleans, null: short by nature; dump() of a scalar cannot throw.
      return ShownText(v.dump(), max_bytes);
  }
}

}  // namespace gpuslice::api
