// gpuslice doctor: on this host, which has no NVIDIA driver (it must say so and how to fix
// it), and against the stand-in NVML (tests/devices/fake_nvml.cc: two H100s, the second in MIG
// mode) with a driver's /proc, /sys and /dev files in a scratch sysroot, since no driver can
// be loaded here.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "doctor/doctor.h"
#include "memcap/env.h"
#include "testing/run_program.h"

namespace gpuslice::doctor {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const Finding* Find(const Report& r, const std::string& check) {
  for (const Finding& f : r.findings) {
    if (f.check == check) return &f;
  }
  return nullptr;
}

// A sysroot with what a loaded driver of `version` leaves in /proc, /sys and /dev.
class Sysroot {
 public:
  explicit Sysroot(const std::string& version) {
    dir_ = fs::temp_directory_path() / fmt::format("gs_doctor_{}_{}", version, getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "proc/driver/nvidia");
    fs::create_directories(dir_ / "dev/nvidia-caps");
    fs::create_directories(dir_ / "sys/fs/cgroup");
    std::ofstream(dir_ / "proc/driver/nvidia/version")
        << "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " << version
        << "  Thu Jun  1 00:00:00 UTC 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
    for (const char* n : {"nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"}) {
      std::ofstream(dir_ / "dev" / n) << "";
      fs::permissions(dir_ / "dev" / n, fs::perms(0666));
    }
  }
  ~Sysroot() { fs::remove_all(dir_); }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

Options Offline() {
  Options o;
  o.socket = "";
  o.config = "";
  o.state_dir = "/nonexistent/gpuslice-state";
  return o;
}

TEST(DoctorTest, WithoutADriverItSaysSoAndHowToFixIt) {
  Options o = Offline();
  o.nvml_library = "libnvidia-ml-absent-on-purpose.so.1";
  o.sysroot = (fs::temp_directory_path() / fmt::format("gs_doctor_empty_{}", getpid())).string();
  fs::create_directories(o.sysroot);
  const Report r = RunDoctor(o);
  fs::remove_all(o.sysroot);
  const Finding* driver = Find(r, "driver");
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(driver->outcome, Outcome::kFail);
  EXPECT_THAT(driver->detail, HasSubstr("no NVIDIA driver is loaded"));
  EXPECT_THAT(driver->fix, HasSubstr("install the NVIDIA driver"));
  const Finding* nvml = Find(r, "nvml");
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(nvml->outcome, Outcome::kFail);
  EXPECT_THAT(nvml->detail, HasSubstr("libnvidia-ml-absent-on-purpose.so.1"));
  EXPECT_EQ(Find(r, "gpus")->outcome, Outcome::kSkip);
  EXPECT_EQ(Find(r, "device files")->outcome, Outcome::kSkip);
  EXPECT_EQ(r.ExitCode(), 1);
  const std::string text = ReportText(r, /*brief=*/true);
  EXPECT_THAT(text, HasSubstr("FAIL driver: no NVIDIA driver is loaded"));
  EXPECT_THAT(text, HasSubstr("fix: install the NVIDIA driver"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("skip ")));  // brief: warnings and failures only
  EXPECT_THAT(text, ::testing::EndsWith(fmt::format("doctor: {}\n", Summary(r))));
}

// The stand-in NVML reports driver 535.54.03; the module's version must match it.
TEST(DoctorTest, AgainstTheStandInNvmlEachGpuIsChecked) {
  Sysroot root("535.54.03");
  Options o = Offline();
  o.nvml_library = FAKE_NVML_R535_PATH;
  o.sysroot = root.dir().string();
  const Report r = RunDoctor(o);
  const nlohmann::json j = ReportJson(r);
  SCOPED_TRACE(j.dump(2));
  EXPECT_EQ(Find(r, "driver")->outcome, Outcome::kOk);
  EXPECT_THAT(Find(r, "driver")->detail, HasSubstr("kernel module 535.54.03"));
  EXPECT_EQ(Find(r, "nvml")->outcome, Outcome::kOk);
  EXPECT_THAT(Find(r, "nvml")->detail, HasSubstr("nvml driver 535.54.03"));
  EXPECT_THAT(Find(r, "gpus")->detail, HasSubstr("2 GPU(s)"));
  EXPECT_THAT(Find(r, "gpu 0")->detail, HasSubstr("NVIDIA H100 80GB HBM3"));
  EXPECT_EQ(Find(r, "gpu 0 mig")->outcome, Outcome::kOk);
  EXPECT_THAT(Find(r, "gpu 0 mig")->detail, HasSubstr("MIG disabled"));
  EXPECT_THAT(Find(r, "gpu 1 mig")->detail, HasSubstr("MIG enabled"));
  // The memory cap: MIG instances on the MIG GPU, the interposer on the other.
  EXPECT_THAT(Find(r, "gpu 1 memory cap")->detail, HasSubstr("MIG instances"));
  if (!memcap::LibraryPath().empty()) {
    EXPECT_THAT(Find(r, "gpu 0 memory cap")->detail, HasSubstr("libgpuslice-cuda.so (LD_PRELOAD)"));
    EXPECT_EQ(Find(r, "glibc")->outcome, Outcome::kOk);
  }
  EXPECT_EQ(Find(r, "device files")->outcome, Outcome::kOk);
  EXPECT_EQ(j["checks"].size(), r.findings.size());
  EXPECT_EQ(j["summary"]["fail"], r.Count(Outcome::kFail));
}

TEST(DoctorTest, ADriverLibraryModuleMismatchFailsWithItsFix) {
  Sysroot root("535.104.05");
  fs::permissions(root.dir() / "dev/nvidia1", fs::perms(0600));
  fs::remove_all(root.dir() / "dev/nvidia-caps");
  Options o = Offline();
  o.nvml_library = FAKE_NVML_R535_PATH;
  o.sysroot = root.dir().string();
  const Report r = RunDoctor(o);
  const Finding* nvml = Find(r, "nvml");
  EXPECT_EQ(nvml->outcome, Outcome::kFail);
  EXPECT_THAT(nvml->detail, HasSubstr("NVML is driver 535.54.03 but the kernel module is 535.104.05"));
  EXPECT_THAT(nvml->fix, HasSubstr("reboot"));
  const Finding* files = Find(r, "device files");
  EXPECT_EQ(files->outcome, Outcome::kWarn);
  EXPECT_THAT(files->detail, HasSubstr("/dev/nvidia1 (0600)"));
  const Finding* mig = Find(r, "gpu 1 mig");
  EXPECT_EQ(mig->outcome, Outcome::kWarn);
  EXPECT_THAT(mig->detail, HasSubstr("/dev/nvidia-caps is missing"));
  EXPECT_EQ(r.ExitCode(), 1);
}

TEST(DoctorTest, NouveauIsAFailure) {
  Sysroot root("535.54.03");
  fs::create_directories(root.dir() / "sys/module/nouveau");
  Options o = Offline();
  o.nvml_library = FAKE_NVML_R535_PATH;
  o.sysroot = root.dir().string();
  const Report r = RunDoctor(o);  // kept: Find points into it
  const Finding* f = Find(r, "nouveau");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->outcome, Outcome::kFail);
  EXPECT_THAT(f->fix, HasSubstr("blacklist"));
}

TEST(DoctorTest, TheInterposersGlibcIsReadFromItsElfHeaders) {
  const std::string lib = memcap::LibraryPath();
  ASSERT_FALSE(lib.empty());
  std::string error;
  const std::string need = RequiredGlibc(lib, &error);
  EXPECT_EQ(error, "");
  EXPECT_THAT(need, ::testing::MatchesRegex("2\\.[0-9]+"));
  RequiredGlibc(std::string(GPUSLICE_SOURCE_DIR) + "/README.md", &error);
  EXPECT_THAT(error, HasSubstr("not a readable 64-bit ELF file"));
}

TEST(DoctorTest, TheStateDirectoryAndConfigAreChecked) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("gs_doctor_state_{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir / "state");
  fs::permissions(dir / "state", fs::perms(0755));
  std::ofstream(dir / "bad.toml") << "[queues.interactive]\npriority = \"high\"\n";
  Options o = Offline();
  o.nvml_library = "libnvidia-ml-absent-on-purpose.so.1";
  o.state_dir = (dir / "state").string();
  o.config = (dir / "bad.toml").string();
  Report r = RunDoctor(o);
  EXPECT_EQ(Find(r, "state")->outcome, Outcome::kFail);
  EXPECT_THAT(Find(r, "state")->fix, HasSubstr("chmod 700"));
  EXPECT_EQ(Find(r, "config")->outcome, Outcome::kFail);
  EXPECT_THAT(Find(r, "config")->detail, HasSubstr("queues.interactive.priority = 'high'"));
  // An older store: fine, the next start migrates it.
  fs::permissions(dir / "state", fs::perms(0700));
  fs::copy_file(fs::path(GPUSLICE_SOURCE_DIR) / "tests/store/fixtures/v0/gpuslice.db", dir / "state/gpuslice.db");
  r = RunDoctor(o);
  EXPECT_EQ(Find(r, "state")->outcome, Outcome::kOk);
  EXPECT_THAT(Find(r, "state")->detail, HasSubstr("schema version 0; the next start migrates it"));
  fs::remove_all(dir);
}

// The command: exit code, --json, --brief.
TEST(DoctorTest, TheCommandExitsOneOnAFailureAndSpeaksJson) {
  std::string out;
  auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> full = {std::string(GPUSLICE_BUILD_DIR) + "/apps/gpuslice/gpuslice", "doctor",
                                     "--socket", "", "--config", "", "--nvml-library",
                                     "libnvidia-ml-absent-on-purpose.so.1"};
    full.insert(full.end(), args.begin(), args.end());
    return gpuslice::testing::RunProgram(full, &out);
  };
  EXPECT_EQ(run({"--json"}), 1);
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["ok"], false);
  EXPECT_GE(j["summary"]["fail"].get<int>(), 1);
  bool driver = false;
  for (const auto& c : j["checks"]) driver = driver || (c["check"] == "driver" && c["outcome"] == "fail");
  EXPECT_TRUE(driver);
  EXPECT_EQ(run({"--brief"}), 1);
  EXPECT_THAT(out, HasSubstr("FAIL driver: no NVIDIA driver is loaded"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("skip ")));
}

}  // namespace
}  // namespace gpuslice::doctor
