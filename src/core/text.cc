#include "core/text.h"

#include <algorithm>
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

bool IsInvisibleFormat(char32_t cp) {
  return cp == 0x00AD || cp == 0x061C || cp == 0x180E || (cp >= 0x200B && cp <= 0x200F) ||
         (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) ||
         cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xE0001 || (cp >= 0xE0020 && cp <= 0xE007F);
}

std::string ForTerminal(std::string_view s) {
  const std::string valid = EscapeInvalidUtf8(s);
  std::string out;
  out.reserve(valid.size());
  for (std::size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<std::uint8_t>(valid[i]);
    if (c >= 0xC2) {
      // A multi-byte sequence (valid: EscapeInvalidUtf8 made it so): invisible and direction
      // formatting characters are shown as escapes, so a command cannot be disguised (a
      // right-to-left override reorders what follows it) or hide text.
      const std::size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      char32_t cp = n == 4 ? (c & 0x07) : n == 3 ? (c & 0x0F) : (c & 0x1F);
      for (std::size_t k = 1; k < n && i + k < valid.size(); ++k) {
        cp = (cp << 6) | (static_cast<std::uint8_t>(valid[i + k]) & 0x3F);
      }
      if (IsInvisibleFormat(cp)) {
        out += cp > 0xFFFF ? fmt::format("\\U{:08x}", static_cast<std::uint32_t>(cp))
                           : fmt::format("\\u{:04x}", static_cast<std::uint32_t>(cp));
        i += n - 1;
        continue;
      }
    }
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

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
int B64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      v = (v << 8) | (k < n ? static_cast<std::uint8_t>(bytes[i + k]) : 0u);
    }
    for (std::size_t k = 0; k < 4; ++k) {
      out += k <= n ? kB64[(v >> (18 - 6 * k)) & 63] : '=';
    }
  }
  return out;
}

bool Base64Decode(std::string_view text, std::string* out) {
  out->clear();
  if (text.size() % 4 != 0) return false;
  out->reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && last && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      const int d = B64Value(c);
      if (d < 0 || pad > 0) return false;  // bad character, or data after padding
      v = (v << 6) | static_cast<std::uint32_t>(d);
    }
    // Non-zero bits under the padding would give a second encoding of the same bytes.
    if ((pad == 1 && (v & 0xFF)) || (pad == 2 && (v & 0xFFFF))) return false;
    out->push_back(static_cast<char>((v >> 16) & 0xFF));
    if (pad < 2) out->push_back(static_cast<char>((v >> 8) & 0xFF));
    if (pad < 1) out->push_back(static_cast<char>(v & 0xFF));
  }
  return true;
}

}  // namespace gpuslice
