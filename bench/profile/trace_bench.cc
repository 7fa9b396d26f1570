// Benchmark: analyse a ~100 MB synthetic Kineto trace (target < 5 s and < 1 GiB peak RSS).
// Writes the trace to /tmp (streamed, so generating it costs no memory), then measures
//   1. baseline: reading the bytes only (the I/O floor), same file, same run;
//   2. gpuslice: ParseTraceFile (SAX) + AnalyseTrace;
//   3. optional baseline (--dom): nlohmann DOM parse of the same file in a child process,
//      to show why the parser streams (needs several GiB: off by default on shared hosts).
// Usage: profile_trace_bench [--mb 100] [--dom] [--keep]
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "profile/analysis.h"
#include "profile/trace.h"

namespace {

long VmHwmKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

// A trace shaped like a real one: per step a DataLoader call, forward ops on the main
// thread, backward ops on the autograd thread, an optimizer step, each op with a runtime
// launch, a kernel, flow events and [memory] instants; ops carry Input Dims and call stacks.
std::size_t Generate(const std::string& path, std::size_t target_bytes) {
  FILE* f = std::fopen(path.c_str(), "w");
  std::size_t n = 0;
  auto put = [&](const std::string& s) { std::fputs(s.c_str(), f); n += s.size(); };
  put(R"({"schemaVersion":1,"deviceProperties":[{"id":0,"name":"NVIDIA H100 80GB HBM3","totalGlobalMem":85045870592,"computeMajor":9,"computeMinor":0,"numSms":132}],)"
      R"("distributedInfo":{"backend":"nccl","rank":0,"world_size":8},"traceEvents":[)" "\n");
  long long t = 1'000'000, corr = 1, ext = 1;
  bool first = true;
  auto ev = [&](const std::string& s) { put(first ? s : ",\n" + s); first = false; };
  const char* kernels[] = {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
                           "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
                           "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct, float const*)",
                           "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"};
  for (int step = 0; n < target_bytes; ++step) {
    long long s0 = t;
    ev(fmt::format(R"({{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{}","pid":100,"tid":100,"ts":{}.125,"dur":{}.5,"args":{{"External id":{}}}}})", step, t, 40000, ext++));
    ev(fmt::format(R"({{"ph":"X","cat":"cpu_op","name":"enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__","pid":100,"tid":100,"ts":{}.5,"dur":2000.25,"args":{{"External id":{}}}}})", t + 1, ext++));
    t += 2100;
    for (int op = 0; op < 400; ++op) {
      bool bwd = op >= 200;
      int tid = bwd ? 101 : 100;
      const char* kname = kernels[op % 4];
      ev(fmt::format(R"({{"ph":"X","cat":"cpu_op","name":"aten::{}","pid":100,"tid":{},"ts":{}.25,"dur":60.5,"args":{{"External id":{},"Record function id":0,"Sequence number":{},"Fwd thread id":0,"Input Dims":[[256,1024],[1024,1024],[]],"Input type":["float","float","Scalar"],"Call stack":"train.py(120): step;torch/nn/modules/module.py(1501): _call_impl"}}}})",
                     bwd ? "mm_backward" : "linear", tid, t, ext, op, ext));
      ev(fmt::format(R"({{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,"tid":{},"ts":{}.75,"dur":6.25,"args":{{"External id":{},"cbid":211,"correlation":{}}}}})", tid, t + 10, ext, corr));
      ev(fmt::format(R"({{"ph":"s","id":{},"pid":100,"tid":{},"ts":{}.75,"cat":"ac2g","name":"ac2g"}})", corr, tid, t + 10));
      ev(fmt::format(R"({{"ph":"X","cat":"kernel","name":"{}","pid":0,"tid":7,"ts":{}.5,"dur":70.25,"args":{{"External id":{},"queued":0,"device":0,"context":1,"stream":7,"correlation":{},"registers per thread":128,"shared memory":65536,"blocks per SM":1.5,"warps per SM":12.0,"grid":[132,1,1],"block":[256,1,1],"est. achieved occupancy %":25}}}})",
                     kname, t + 20, ext, corr));
      ev(fmt::format(R"({{"ph":"f","id":{},"pid":0,"tid":7,"ts":{}.5,"cat":"ac2g","name":"ac2g","bp":"e"}})", corr, t + 20));
      ev(fmt::format(R"({{"ph":"i","s":"t","name":"[memory]","pid":100,"tid":{},"ts":{},"args":{{"Addr":1234567,"Bytes":1048576,"Total Allocated":{},"Total Reserved":{},"Device Type":1,"Device Id":0}}}})",
                     tid, t + 30, 40000000000LL + op * 1048576LL, 60000000000LL));
      ++corr;
      ++ext;
      t += 90;
    }
    ev(fmt::format(R"({{"ph":"X","cat":"cpu_op","name":"Optimizer.step#AdamW.step","pid":100,"tid":100,"ts":{},"dur":500,"args":{{"External id":{}}}}})", t, ext++));
    t = s0 + 40001;
  }
  put("\n]}\n");
  std::fclose(f);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mb = 100;
  bool dom = false, keep = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) mb = std::stoul(argv[++i]);
    else if (!std::strcmp(argv[i], "--dom")) dom = true;
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
  }
  std::string path = fmt::format("/tmp/gpuslice_profile_bench_{}.json", getpid());
  auto t0 = std::chrono::steady_clock::now();
  std::size_t bytes = Generate(path, mb * 1000 * 1000);
  fmt::print("generated {} ({:.1f} MB) in {:.2f} s\n", path, bytes / 1e6, Seconds(t0));

  // Baseline: read the bytes only, through the same zlib path.
  t0 = std::chrono::steady_clock::now();
  {
    gzFile g = gzopen(path.c_str(), "rb");
    std::vector<char> buf(1 << 20);
    std::size_t total = 0;
    for (int r; (r = gzread(g, buf.data(), static_cast<unsigned>(buf.size()))) > 0;) total += static_cast<std::size_t>(r);
    gzclose(g);
    if (total != bytes) fmt::print("read {} of {} bytes?\n", total, bytes);
  }
  double read_s = Seconds(t0);

  long hwm_before = VmHwmKiB();
  std::clock_t cpu0 = std::clock();
  t0 = std::chrono::steady_clock::now();
  auto parsed = gpuslice::profile::ParseTraceFile(path);
  double parse_s = Seconds(t0);
  if (!parsed.ok()) {
    fmt::print("parse failed: {}\n", parsed.status().ToString());
    return 1;
  }
  t0 = std::chrono::steady_clock::now();
  auto a = gpuslice::profile::AnalyseTrace(*parsed);
  double analyse_s = Seconds(t0);
  long hwm = VmHwmKiB();
  double cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  if (!a.ok()) return 1;
  double total_s = parse_s + analyse_s;
  fmt::print("events {}, steps {}, kernels {}\n", parsed->events_read, a->steps.size(), a->kernels);
  fmt::print("baseline read-only:   {:.2f} s ({:.0f} MB/s)\n", read_s, bytes / 1e6 / read_s);
  fmt::print("parse (SAX):          {:.2f} s ({:.0f} MB/s)\n", parse_s, bytes / 1e6 / parse_s);
  fmt::print("analyse:              {:.2f} s\n", analyse_s);
  fmt::print("total:                {:.2f} s  (target < 5 s: {}); {:.1f}x the read-only baseline\n", total_s,
             total_s < 5 ? "met" : "MISSED", total_s / read_s);
  fmt::print("CPU time parse+analyse: {:.2f} s (wall above includes waiting for a shared CPU)\n", cpu_s);
  fmt::print("peak RSS (VmHWM):     {:.1f} MiB (before parse {:.1f} MiB; target < 1024 MiB: {})\n", hwm / 1024.0,
             hwm_before / 1024.0, hwm < 1024 * 1024 ? "met" : "MISSED");
  if (dom) {
    pid_t c = fork();
    if (c == 0) {
      auto d0 = std::chrono::steady_clock::now();
      std::ifstream in(path);
      auto j = nlohmann::json::parse(in);
      fmt::print("baseline DOM parse:   {:.2f} s, VmHWM {:.1f} MiB ({} events)\n", Seconds(d0), VmHwmKiB() / 1024.0,
                 j["traceEvents"].size());
      _exit(0);
    }
    waitpid(c, nullptr, 0);
  }
  if (!keep) std::remove(path.c_str());
  return 0;
}
