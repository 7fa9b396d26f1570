#pragma once
// Helpers shared by the libFuzzer targets in fuzz/ (docs/fuzzing.md). Not thread-safe: a
// target runs one input at a time.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::fuzz {

inline std::string_view AsText(const std::uint8_t* data, std::size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// A property the parser promises was broken: report it as a crash so libFuzzer keeps the input.
[[noreturn]] inline void Fail(std::string_view what) {
  std::fprintf(stderr, "fuzz property violated: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}
inline void Check(bool ok, std::string_view what) {
  if (!ok) Fail(what);
}

// A private directory for the run, under $TMPDIR (/dev/shm when it exists: the readers that
// take a path get a file per input, and tmpfs keeps that cheap). Removed at exit.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string root = base != nullptr && base[0] != '\0' ? base
                       : access("/dev/shm", W_OK) == 0    ? "/dev/shm"
                                                          : "/tmp";
    std::string tmpl = root + "/gpuslice-fuzz-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) Fail("mkdtemp failed");
    std::string made(buf.data());
    static std::string to_remove;
    to_remove = made;
    std::atexit([] {
      std::string cmd = "rm -rf '" + to_remove + "'";
      (void)std::system(cmd.c_str());
    });
    return made;
  }();
  return dir;
}

// Writes `content` to ScratchDir()/name (replacing it) and returns the path.
inline std::string WriteScratch(std::string_view name, std::string_view content) {
  std::string path = ScratchDir() + "/" + std::string(name);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Fail("cannot write a scratch file");
  if (!content.empty() && std::fwrite(content.data(), 1, content.size(), f) != content.size()) {
    Fail("short write to a scratch file");
  }
  std::fclose(f);
  return path;
}

// Splits an input into parts at `sep` (the corpora use it to put several documents in one
// input, e.g. a node list and a pod list).
inline std::vector<std::string_view> SplitInput(std::string_view s, std::string_view sep) {
  std::vector<std::string_view> out;
  while (true) {
    std::size_t p = s.find(sep);
    out.push_back(s.substr(0, p));
    if (p == std::string_view::npos) return out;
    s.remove_prefix(p + sep.size());
  }
}

// Every error a parser returns must still format (it is what the user sees).
inline void TouchError(const Status& st) {
  Check(!st.ok(), "an error Status is OK");
  std::string text = st.ToString();
  Check(!text.empty(), "an error without a message");
}

}  // namespace gpuslice::fuzz
