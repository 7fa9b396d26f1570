#pragma once
// Recording side of `gpuslice profile`: runs (or attaches to) a program and samples, at a
// fixed interval (>= 10 Hz by default), the GPU (utilisation, memory; through the device
// layer) and the program's process tree from /proc: per process CPU time and state (running,
// I/O wait = state D or growing delayacct_blkio_ticks, sleeping), the main process apart from
// its children (data-loader workers), bytes read from storage (/proc/PID/io read_bytes) and
// received from the network (/proc/PID/net/dev, the process's network namespace).
// The program gets GPUSLICE_STEP_FILE; python/gpuslice_steps.py appends step markers there.
//
// Recorder is single-threaded: Record() blocks until the program ends (or the attached
// process exits, or max_duration passes). Not thread-safe; one recording per object.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::devices {
class DeviceBackend;
}

namespace gpuslice::profile {

// One GPU reading. Utilisation in permille (0..1000) over the time since the previous read.
struct GpuReading {
  std::optional<int> util_permille;
  std::optional<Bytes> memory_used;
  std::optional<Bytes> memory_total;
};

// What Recorder needs from the GPU side. Implementation: MakeBackendSampler (the device
// layer — NVML, or the fake backend for --simulate and tests — through agent::Agent).
class GpuSampler {
 public:
  virtual ~GpuSampler() = default;
  virtual std::string Describe() const = 0;
  virtual Result<GpuReading> Read() = 0;
};

// Samples one device of a DeviceBackend through agent::Agent (the one sampler); the backend
// must outlive the sampler.
std::unique_ptr<GpuSampler> MakeBackendSampler(devices::DeviceBackend* backend, int device_index);

enum class ProcState { kRunning, kIoWait, kSleeping, kGone };
std::string_view ProcStateName(ProcState s);

// Raw figures for one process from /proc (cumulative counters).
struct ProcStat {
  int pid = 0;
  int ppid = 0;
  char state = '?';
  std::int64_t cpu_ticks = 0;    // utime + stime
  std::int64_t blkio_ticks = 0;  // delayacct_blkio_ticks (0 when delay accounting is off)
  std::optional<std::int64_t> read_bytes;  // /proc/PID/io; absent when not permitted
};
Result<ProcStat> ReadProcStat(int pid);
// `root` and every descendant (by ppid), root first.
std::vector<int> ProcessTree(int root);
// The process that does the work: `root`, or, while that is a launcher that only waits
// for one child (sh/bash/env/pyenv/timeout/nice/..., by /proc/PID/comm), that child.
// So `gpuslice profile -- sh run.sh` watches the python the script starts, not the shell.
int MainProcess(int root);
// The same on one snapshot of the tree (pid -> its stat): children are taken from the snapshot,
// so the main process and the workers of one sample agree even while processes fork and exit.
int MainProcess(int root, const std::map<int, ProcStat>& tree);
// Bytes received on all interfaces but loopback in `pid`'s network namespace.
std::optional<std::int64_t> NetworkRxBytes(int pid);

struct Sample {
  Micros t = 0;  // µs since the Unix epoch (CLOCK_REALTIME, same clock as the step markers)
  std::optional<int> gpu_util_permille;
  std::optional<Bytes> gpu_memory_used;
  std::optional<Bytes> gpu_memory_total;
  ProcState main_state = ProcState::kGone;
  int main_cpu_permille = 0;     // CPU use of the main process over the interval (1000 = 1 core)
  int workers = 0;               // live descendant processes
  int workers_running = 0;
  int workers_iowait = 0;
  int workers_cpu_permille = 0;  // summed over workers
  std::int64_t read_bytes_per_s = 0;  // storage reads, whole tree
  std::int64_t net_rx_bytes_per_s = 0;
};

// One step as the program marked it (see python/gpuslice_steps.py and docs/profile.md).
struct StepMark {
  std::int64_t step = 0;
  Micros start = 0;
  std::optional<Micros> data_ready;  // end of the wait for the batch
  std::optional<Micros> end;
};
// Parses the JSON-lines step file. A malformed line is an error naming the file and line.
Result<std::vector<StepMark>> ReadStepFile(const std::string& path);

struct RecordOptions {
  std::vector<std::string> command;  // run this (argv), or
  int attach_pid = 0;                // attach to this process
  Micros interval = 100 * kMillisecond;
  Micros max_duration = 0;           // 0: until the program ends
  std::string step_file;             // set as GPUSLICE_STEP_FILE for the child
  std::string python_dir;            // prepended to the child's PYTHONPATH (gpuslice_steps.py)
};

struct Recording {
  Micros start = 0;
  Micros end = 0;
  int pid = 0;
  int main_pid = 0;              // the main process in most samples (see MainProcess)
  std::optional<int> exit_code;  // for a program we ran
  std::string gpu_description;
  std::string gpu_error;         // first GPU read error, if any
  std::vector<Sample> samples;
  std::vector<StepMark> steps;
  int max_workers = 0;
};

// `gpu` may be null (no GPU figures). Errors: the command cannot be started, the pid does not
// exist, the step file is malformed.
Result<Recording> Record(const RecordOptions& options, GpuSampler* gpu);

}  // namespace gpuslice::profile
