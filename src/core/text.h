#pragma once
// Text that leaves gpuslice (HTTP bodies, JSON, the CLI's terminal output, log lines) is made
// safe here, in one place. Anything a user submitted (argv, environment, cwd, a name) may hold
// arbitrary bytes; these functions never fail and never throw.
//   EscapeInvalidUtf8: valid UTF-8 passes through unchanged; each byte that is not part of a
//     well-formed sequence (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF)
//     becomes the four characters "\xNN". The result is always valid UTF-8.
//   ForTerminal: EscapeInvalidUtf8, then every control character (C0, DEL, C1 U+0080-U+009F)
//     is shown as an escape ("\n", "\t", "\r", "\e", "\x07", "\u009b"), so a value can neither
//     move the cursor, change colours, set the window title nor start a new row; and so is every
//     invisible or direction-formatting character (IsInvisibleFormat: "\u202e"), so a value
//     cannot reorder or hide what others see; a backslash is left as is.
// Free functions only; thread-safe.

#include <string>
#include <string_view>

namespace gpuslice {

bool IsValidUtf8(std::string_view s);
std::string EscapeInvalidUtf8(std::string_view s);
std::string ForTerminal(std::string_view s);
// Bidirectional overrides, embeddings and isolates (U+202A-U+202E, U+2066-U+2069), zero-width
// and other invisible format characters (U+200B-U+200F, U+2060-U+2064, U+FEFF, U+00AD,
// U+061C, U+180E, U+206A-U+206F, U+FFF9-U+FFFB), line and paragraph separators (U+2028,
// U+2029) and tag characters (U+E0001, U+E0020-U+E007F).
bool IsInvisibleFormat(char32_t cp);

// Standard base64 (RFC 4648 §4, with '=' padding): how bytes that are not valid UTF-8 travel
// losslessly inside JSON (see store::BytesToJson). Decode rejects any other alphabet, bad
// padding and non-zero trailing bits, so every byte string has exactly one encoding.
std::string Base64Encode(std::string_view bytes);
bool Base64Decode(std::string_view text, std::string* out);

}  // namespace gpuslice
