#include "memcap/check.h"

#include <elf.h>
#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::memcap {
namespace {

// Reads a T at `off` of `data`, or false when it does not fit (a malformed or hostile file).
template <typename T>
bool At(const std::vector<char>& data, std::uint64_t off, T* out) {
  if (off > data.size() || data.size() - off < sizeof(T)) return false;
  std::memcpy(out, data.data() + off, sizeof(T));
  return true;
}

// The NUL-terminated string at `off` of the string table [start, start + size), or nullptr.
const char* StringAt(const std::vector<char>& data, std::uint64_t start, std::uint64_t size,
                     std::uint64_t off) {
  if (start > data.size() || size > data.size() - start || off >= size) return nullptr;
  const char* s = data.data() + start + off;
  return std::memchr(s, '\0', size - off) != nullptr ? s : nullptr;
}

// "GLIBC_2.34" -> "2.34"; "" for anything else (GLIBC_PRIVATE, other libraries' versions).
std::string_view GlibcRelease(std::string_view name) {
  constexpr std::string_view kPrefix = "GLIBC_";
  if (!name.starts_with(kPrefix)) return {};
  name.remove_prefix(kPrefix.size());
  if (name.empty() || name.front() < '0' || name.front() > '9') return {};
  for (char c : name) {
    if ((c < '0' || c > '9') && c != '.') return {};
  }
  return name;
}

}  // namespace

int CompareVersions(std::string_view a, std::string_view b) {
  while (!a.empty() || !b.empty()) {
    auto next = [](std::string_view& s) {
      long v = 0;
      std::size_t i = 0;
      for (; i < s.size() && s[i] != '.'; ++i) {
        if (s[i] >= '0' && s[i] <= '9' && v < 100000) v = v * 10 + (s[i] - '0');
      }
      s.remove_prefix(i < s.size() ? i + 1 : i);
      return v;
    };
    const long x = next(a), y = next(b);
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

Result<std::string> RequiredGlibc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("'{}': no such file or not readable", path));
  // The interposer is ~100 KiB; a limit keeps a wrong path (a huge file) from being read whole.
  constexpr std::size_t kMaxBytes = 64u << 20;
  std::vector<char> data;
  data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (data.size() > kMaxBytes) return InvalidArgument(fmt::format("'{}': larger than 64 MiB, not the interposer", path));
  const auto bad = [&](std::string_view what) {
    return InvalidArgument(fmt::format("'{}': {}", path, what));
  };
  Elf64_Ehdr eh;
  if (!At(data, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return bad("not an ELF file");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return bad("not a 64-bit ELF file");
  if (eh.e_shentsize != sizeof(Elf64_Shdr)) return bad("unexpected section header size");
  std::string newest;
  for (std::uint64_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    if (!At(data, eh.e_shoff + i * sizeof(Elf64_Shdr), &sh)) return bad("section headers out of the file");
    if (sh.sh_type != SHT_GNU_verneed) continue;
    Elf64_Shdr strtab;
    if (!At(data, eh.e_shoff + static_cast<std::uint64_t>(sh.sh_link) * sizeof(Elf64_Shdr), &strtab)) {
      return bad("version needs without a string table");
    }
    std::uint64_t off = sh.sh_offset;
    // sh_info is the number of entries; each bounds the walk (a loop in the links ends there).
    for (std::uint64_t n = 0; n < sh.sh_info; ++n) {
      Elf64_Verneed vn;
      if (!At(data, off, &vn)) return bad("version needs out of the file");
      std::uint64_t aux = off + vn.vn_aux;
      for (std::uint64_t k = 0; k < vn.vn_cnt; ++k) {
        Elf64_Vernaux va;
        if (!At(data, aux, &va)) return bad("version needs out of the file");
        const char* name = StringAt(data, strtab.sh_offset, strtab.sh_size, va.vna_name);
        if (name == nullptr) return bad("version name out of its string table");
        const std::string_view release = GlibcRelease(name);
        if (!release.empty() && (newest.empty() || CompareVersions(release, newest) > 0)) newest = release;
        if (va.vna_next == 0) break;
        aux += va.vna_next;
      }
      if (vn.vn_next == 0) break;
      off += vn.vn_next;
    }
  }
  return newest;
}

std::string HostGlibc() {
#ifdef __GLIBC__
  return gnu_get_libc_version();
#else
  return "";
#endif
}

InterposerCheck CheckInterposer(std::string path, std::string host_glibc) {
  InterposerCheck c;
  c.path = std::move(path);
  c.host_glibc = std::move(host_glibc);
  if (c.path.empty()) {
    c.problem = "libgpuslice-cuda.so not found (looked at $GPUSLICE_CUDA_LIB, <prefix>/lib/gpuslice/ "
                "and the build tree): reinstall gpuslice";
    return c;
  }
  Result<std::string> needed = RequiredGlibc(c.path);
  if (!needed.ok()) {
    c.problem = fmt::format("libgpuslice-cuda.so at {} cannot be used: {}", c.path, needed.status().message());
    return c;
  }
  c.required_glibc = *needed;
  if (!c.host_glibc.empty() && !c.required_glibc.empty() && CompareVersions(c.required_glibc, c.host_glibc) > 0) {
    c.problem = fmt::format("libgpuslice-cuda.so at {} needs glibc {} but this host has {}: the dynamic "
                            "linker would refuse to load it into the job; install a gpuslice built for "
                            "this glibc",
                            c.path, c.required_glibc, c.host_glibc);
    return c;
  }
  c.usable = true;
  return c;
}

}  // namespace gpuslice::memcap
