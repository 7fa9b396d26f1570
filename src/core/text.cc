#include "core/text.h"

#include <cstdint>

#include <fmt/format.h>

namespace gpuslice {
namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if the byte there does not
// start one. Follows the table of well-formed byte sequences in Unicode §3.9 (D92).
std::size_t SequenceLength(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;       // no overlongs
    if (c == 0xED) hi = 0x9F;       // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;       // no overlongs
    if (c == 0xF4) hi = 0x8F;       // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string EscapeInvalidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = SequenceLength(s, i);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", static_cast<std::uint8_t>(s[i]));
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string ForTerminal(std::string_view s) {
  const std::string valid = EscapeInvalidUtf8(s);
  std::string out;
  out.reserve(valid.size());
  for (std::size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<std::uint8_t>(valid[i]);
    if (c == 0xC2 && i + 1 < valid.size() &&
        static_cast<std::uint8_t>(valid[i + 1]) >= 0x80 &&
        static_cast<std::uint8_t>(valid[i + 1]) <= 0x9F) {
      // C1 control (U+0080-U+009F, e.g. CSI U+009B): two bytes in UTF-8.
      out += fmt::format("\\u{:04x}", static_cast<std::uint8_t>(valid[i + 1]));
      ++i;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case 0x1B: out += "\\e"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace gpuslice
