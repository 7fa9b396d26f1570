// Fuzzes the memcap environment, both sides of it (docs/memcap.md): what the interposer reads
// in every process of a shared slice (GPUSLICE_MEMCAP_BYTES and GPUSLICE_MEMCAP_CONTEXT_BYTES
// through ParseEnvBytes; GPUSLICE_SLICE through FormatSegmentName, which turns any key into a
// shm_open name), and what the executor writes (SliceEnvironment, SegmentName). The job's own
// environment is the input: a hostile tenant controls every byte of it.
#include <cstring>
#include <string>

#include "fuzz/fuzz_util.h"
#include "memcap/env.h"
#include "memcap/segment.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  using namespace gpuslice::memcap;
  const std::string text(fuzz::AsText(data, size));  // getenv() sees up to the first NUL

  std::int64_t bytes = -7;
  if (ParseEnvBytes(text.c_str(), &bytes)) {
    fuzz::Check(bytes >= 0 && bytes <= kMaxEnvBytes, "a byte count out of range");
    std::string digits = text.c_str();
    std::size_t nz = digits.find_first_not_of('0');
    digits = nz == std::string::npos ? "0" : digits.substr(nz);
    fuzz::Check(std::to_string(bytes) == digits, "a byte count that is not the text's value");
  } else {
    fuzz::Check(bytes == -7, "a refused byte count changed the output");
  }

  char name[128];
  fuzz::Check(FormatSegmentName(text.data(), text.size(), name, sizeof name), "a 128-byte buffer was short");
  std::size_t len = std::strlen(name);
  fuzz::Check(len < sizeof name && len <= 255, "segment name too long for shm_open");
  fuzz::Check(std::strncmp(name, "/gpuslice-memcap-", 17) == 0, "segment name without its prefix");
  for (std::size_t i = 1; i < len; ++i) {
    char c = name[i];
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
    fuzz::Check(safe, "segment name with a character shm_open or a shell could misread");
  }
  fuzz::Check(SegmentName(text) == name, "SegmentName differs from FormatSegmentName");

  // The executor's writer and the interposer's reader agree on every cap.
  const Bytes cap = size >= 8 ? static_cast<Bytes>(data[0] | (std::uint64_t{data[1]} << 8) |
                                                   (std::uint64_t{data[2]} << 16) | (std::uint64_t{data[3]} << 32))
                              : static_cast<Bytes>(size);
  for (const auto& [k, v] : SliceEnvironment(text, cap)) {
    if (k != kEnvCapBytes) continue;
    std::int64_t back = -1;
    fuzz::Check(ParseEnvBytes(v.c_str(), &back) && back == cap, "the interposer cannot read the cap it is given");
  }
  return 0;
}
