#include "doctor/doctor.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "core/text.h"
#include "doctor/checks.h"

namespace gpuslice::doctor {
// Numerically per part: "2.4" is older than "2.34".
bool OlderGlibc(const std::string& a, const std::string& b) {
  std::istringstream ia(a), ib(b);
  std::string pa, pb;
  while (true) {
    const bool ha = static_cast<bool>(std::getline(ia, pa, '.'));
    const bool hb = static_cast<bool>(std::getline(ib, pb, '.'));
    if (!ha || !hb) return !ha && hb;
    const int x = std::atoi(pa.c_str()), y = std::atoi(pb.c_str());
    if (x != y) return x < y;
  }
}

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kWarn: return "warn";
    case Outcome::kFail: return "fail";
    case Outcome::kSkip: return "skip";
  }
  return "?";
}

int Report::Count(Outcome o) const {
  int n = 0;
  for (const Finding& f : findings) n += f.outcome == o ? 1 : 0;
  return n;
}

int Report::ExitCode() const { return Count(Outcome::kFail) == 0 ? 0 : 1; }

Report RunDoctor(const Options& o) {
  Report r;
  std::string module_version;
  CheckDriver(o, r, &module_version);
  CheckGpus(o, r, module_version);
  CheckDeviceNodes(o, r);
  CheckInterposerGlibc(r);
  CheckCgroup(o, r);
  CheckExecStub(r);
  CheckConfig(o, r);
  CheckStateDir(o, r);
  CheckSocket(o, r);
  CheckClock(r);
  CheckSlurm(o, r);
  return r;
}

nlohmann::json ReportJson(const Report& r) {
  nlohmann::json checks = nlohmann::json::array();
  for (const Finding& f : r.findings) {
    checks.push_back({{"check", f.check}, {"outcome", OutcomeName(f.outcome)},
                      {"detail", f.detail}, {"fix", f.fix}});
  }
  return {{"ok", r.ExitCode() == 0},
          {"summary", {{"ok", r.Count(Outcome::kOk)}, {"warn", r.Count(Outcome::kWarn)},
                       {"fail", r.Count(Outcome::kFail)}, {"skip", r.Count(Outcome::kSkip)}}},
          {"checks", checks}};
}

std::string Summary(const Report& r) {
  auto n = [&](Outcome o, const char* one, const char* many) {
    const int c = r.Count(o);
    return fmt::format("{} {}", c, c == 1 ? one : many);
  };
  return fmt::format("{}, {}, {}, {}", n(Outcome::kOk, "ok", "ok"), n(Outcome::kWarn, "warning", "warnings"),
                     n(Outcome::kFail, "failure", "failures"), n(Outcome::kSkip, "skipped", "skipped"));
}

std::string ReportText(const Report& r, bool brief) {
  std::string out;
  for (const Finding& f : r.findings) {
    if (brief && f.outcome != Outcome::kWarn && f.outcome != Outcome::kFail) continue;
    const char* tag = f.outcome == Outcome::kOk     ? "ok  "
                      : f.outcome == Outcome::kWarn ? "WARN"
                      : f.outcome == Outcome::kFail ? "FAIL"
                                                    : "skip";
    // Details quote files, drivers and configs: shown safe for a terminal.
    out += fmt::format("  {} {}: {}\n", tag, f.check, ForTerminal(f.detail));
    if (!f.fix.empty()) out += fmt::format("       fix: {}\n", ForTerminal(f.fix));
  }
  out += fmt::format("doctor: {}\n", Summary(r));
  return out;
}

std::string RequiredGlibc(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fail = [&](const char* why) {
    *error = fmt::format("{}: {}", path, why);
    return std::string();
  };
  error->clear();
  if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0 ||
      data[EI_CLASS] != ELFCLASS64) {
    return fail("not a readable 64-bit ELF file");
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof eh);
  auto section = [&](std::size_t i, Elf64_Shdr* out) {
    const std::size_t at = eh.e_shoff + i * sizeof(Elf64_Shdr);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || at + sizeof(Elf64_Shdr) > data.size()) return false;
    std::memcpy(out, data.data() + at, sizeof *out);
    return out->sh_offset + out->sh_size <= data.size();
  };
  std::string best;
  for (std::size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh, strtab;
    if (!section(i, &sh)) return fail("a section header lies outside the file");
    if (sh.sh_type != SHT_GNU_verneed) continue;
    if (!section(sh.sh_link, &strtab)) return fail("its version strings lie outside the file");
    auto name_at = [&](std::size_t off) -> std::string {
      if (off >= strtab.sh_size) return "";
      const char* s = data.data() + strtab.sh_offset + off;
      return std::string(s, strnlen(s, strtab.sh_size - off));
    };
    std::size_t need = sh.sh_offset;
    for (int n = 0; n < 1000 && need + sizeof(Elf64_Verneed) <= sh.sh_offset + sh.sh_size; ++n) {
      Elf64_Verneed vn;
      std::memcpy(&vn, data.data() + need, sizeof vn);
      std::size_t aux = need + vn.vn_aux;
      for (int k = 0; k < vn.vn_cnt && aux + sizeof(Elf64_Vernaux) <= sh.sh_offset + sh.sh_size; ++k) {
        Elf64_Vernaux va;
        std::memcpy(&va, data.data() + aux, sizeof va);
        const std::string name = name_at(va.vna_name);
        if (name.rfind("GLIBC_", 0) == 0 && name != "GLIBC_PRIVATE") {
          const std::string v = name.substr(6);
          if (best.empty() || OlderGlibc(best, v)) best = v;
        }
        if (va.vna_next == 0) break;
        aux += va.vna_next;
      }
      if (vn.vn_next == 0) break;
      need += vn.vn_next;
    }
  }
  return best;
}

}  // namespace gpuslice::doctor
