#include "profile/trace.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gpuslice::profile {
namespace {

bool Contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}
bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// ---- input: a chunked reader over gzread (which also passes plain files through) ----------

// Reads a file in 1 MiB chunks through zlib; gzread transparently copies non-gzip input, so
// one path serves .json and .json.gz. Not thread-safe; one parse at a time.
// Reading stops after `max_bytes` of decompressed input (ParseTraceFile's limit): a torch.profiler
// trace of the few steps `profile` needs is far smaller.
class ChunkReader {
 public:
  ChunkReader(gzFile f, std::size_t max_bytes) : f_(f), buf_(1 << 20), max_bytes_(max_bytes) {}
  // Set when the input passed max_bytes; reading stops there.
  bool too_large() const { return too_large_; }
  ~ChunkReader() { gzclose(f_); }
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  bool AtEnd() {
    if (pos_ < len_) return false;
    Refill();
    return pos_ >= len_;
  }
  char Peek() const { return buf_[pos_]; }
  void Advance() { ++pos_; }
  // zlib's complaint, if reading stopped on an error (e.g. a truncated .gz); empty otherwise.
  const std::string& error() const { return error_; }

 private:
  void Refill() {
    if (eof_) return;
    int n = gzread(f_, buf_.data(), static_cast<unsigned>(buf_.size()));
    pos_ = 0;
    len_ = n > 0 ? static_cast<std::size_t>(n) : 0;
    total_ += len_;
    if (total_ > max_bytes_) {
      too_large_ = true;
      eof_ = true;
      len_ = 0;  // the parser sees the input end early and stops
      return;
    }
    if (n <= 0) {
      eof_ = true;
      int errnum = 0;
      const char* msg = gzerror(f_, &errnum);
      if (errnum != Z_OK && msg != nullptr) error_ = msg;
    }
  }

  gzFile f_;
  std::vector<char> buf_;
  std::size_t pos_ = 0;
  std::size_t len_ = 0;
  std::size_t max_bytes_;
  std::size_t total_ = 0;
  bool eof_ = false;
  bool too_large_ = false;
  std::string error_;
};

// Input iterator over a ChunkReader, for nlohmann's iterator input adapter (no virtual call
// per character, unlike the istream adapter).
class ChunkIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  ChunkIterator() = default;  // end
  explicit ChunkIterator(ChunkReader* r) : r_(r) {}
  char operator*() const { return r_->Peek(); }
  ChunkIterator& operator++() { r_->Advance(); return *this; }
  bool operator==(const ChunkIterator& o) const { return AtEnd() == o.AtEnd(); }
  bool operator!=(const ChunkIterator& o) const { return !(*this == o); }

 private:
  bool AtEnd() const { return r_ == nullptr || r_->AtEnd(); }
  ChunkReader* r_ = nullptr;
};

// ---- SAX handler -------------------------------------------------------------------------

enum class Cat : std::uint8_t { kOther, kCpu, kRuntime, kKernel, kMemcpy, kMemset, kGpuAnnotation };

Cat ParseCat(std::string_view c) {
  if (c == "cpu_op" || c == "Operator" || c == "user_annotation" || c == "python_function")
    return Cat::kCpu;
  if (c == "cuda_runtime" || c == "Runtime" || c == "cuda_driver") return Cat::kRuntime;
  if (c == "kernel" || c == "Kernel") return Cat::kKernel;
  if (c == "gpu_memcpy" || c == "Memcpy") return Cat::kMemcpy;
  if (c == "gpu_memset" || c == "Memset") return Cat::kMemset;
  if (c == "gpu_user_annotation") return Cat::kGpuAnnotation;
  return Cat::kOther;
}

using Json = nlohmann::json;

// Object keys the reader cares about, decided once per key instead of comparing strings for
// every value (the parser's hot path).
enum class Key : std::uint8_t {
  kOther, kPh, kCat, kName, kTs, kDur, kTid, kArgs, kCorrelation, kTotalReserved, kDeviceType,
  kTraceEvents, kDeviceProperties, kDistributedInfo, kTotalGlobalMem, kComputeMajor, kRank,
  kWorldSize
};

Key ParseKey(std::string_view k) {
  switch (k.size()) {
    case 2: return k == "ph" ? Key::kPh : k == "ts" ? Key::kTs : Key::kOther;
    case 3: return k == "cat" ? Key::kCat : k == "dur" ? Key::kDur : k == "tid" ? Key::kTid : Key::kOther;
    case 4: return k == "name" ? Key::kName : k == "args" ? Key::kArgs : k == "rank" ? Key::kRank : Key::kOther;
    default: break;
  }
  if (k == "correlation") return Key::kCorrelation;
  if (k == "Total Reserved") return Key::kTotalReserved;
  if (k == "Device Type") return Key::kDeviceType;
  if (k == "traceEvents") return Key::kTraceEvents;
  if (k == "deviceProperties") return Key::kDeviceProperties;
  if (k == "distributedInfo") return Key::kDistributedInfo;
  if (k == "totalGlobalMem") return Key::kTotalGlobalMem;
  if (k == "computeMajor") return Key::kComputeMajor;
  if (k == "world_size") return Key::kWorldSize;
  return Key::kOther;
}

class KinetoSax {
 public:
  explicit KinetoSax(ParsedTrace* out) : out_(out) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t v) { return Number(static_cast<double>(v), v, true); }
  bool number_unsigned(Json::number_unsigned_t v) {
    if (v > static_cast<Json::number_unsigned_t>(std::numeric_limits<std::int64_t>::max())) {
      return OutOfRange(static_cast<double>(v));
    }
    return Number(static_cast<double>(v), static_cast<std::int64_t>(v), true);
  }
  bool number_float(Json::number_float_t v, const Json::string_t&) {
    // Only in range is the cast to an integer defined (1e300 or inf would be undefined).
    if (!(std::fabs(v) < 9.2e18)) return OutOfRange(v);
    return Number(v, static_cast<std::int64_t>(v), false);
  }
  bool binary(Json::binary_t&) { return true; }

  bool string(Json::string_t& s) {
    if (InEvent()) {
      switch (keys_[depth_]) {
        case Key::kPh: ev_.ph = s.empty() ? '?' : s[0]; break;
        case Key::kCat: ev_.cat = ParseCat(s); break;
        case Key::kName: ev_.name.assign(s); break;
        case Key::kTid: ev_.tid = InternTid(s); break;
        default: break;
      }
    } else if (InDeviceProps() && k0() == 0 && keys_[depth_] == Key::kName) {
      out_->device_name = s;
    }
    return true;
  }

  bool start_object(std::size_t) {
    Push(false);
    if (depth_ == 1) root_is_object_ = true;
    if (InEventObject()) ev_.Reset();
    if (depth_ == 3 && keys_[1] == Key::kDeviceProperties) ++device_count_;
    return true;
  }
  bool end_object() {
    if (InEventObject()) Finish();
    Pop();
    return true;
  }
  bool start_array(std::size_t) {
    Push(true);
    if (depth_ == 1) events_depth_ = 2;  // a bare array of events
    else if (depth_ == 2 && root_is_object_ && keys_[1] == Key::kTraceEvents) {
      events_depth_ = 3;
      saw_events_ = true;
    }
    return true;
  }
  bool end_array() { Pop(); return true; }
  bool key(Json::string_t& k) {
    if (depth_ < kMaxDepth) keys_[depth_] = ParseKey(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    error_ = fmt::format("malformed JSON at byte {} of the JSON text: {}", position, ex.what());
    return false;
  }

  const std::string& error() const { return error_; }
  bool saw_events() const { return saw_events_ || events_depth_ == 2; }

 private:
  static constexpr int kMaxDepth = 16;
  // |ts| and dur at most 4e15 µs: Unix time up to 2096 (Kineto's ts are µs since the epoch).
  // In ns that is 4e18, so ts + dur and any difference of two stay below 2^63.
  static constexpr double kMaxTimeUs = 4e15;

  struct Current {
    char ph = 0;
    Cat cat = Cat::kOther;
    std::string name;
    Nanos ts = 0, dur = 0;
    bool has_ts = false, has_dur = false;
    std::int64_t tid = 0;
    std::int64_t correlation = -1;
    std::int64_t total_reserved = -1;
    std::int64_t device_type = -1;
    void Reset() {
      ph = 0; cat = Cat::kOther; name.clear(); ts = dur = 0; has_ts = has_dur = false;
      tid = 0; correlation = -1; total_reserved = -1; device_type = -1;
    }
  };

  void Push(bool) {
    ++depth_;
    if (depth_ < kMaxDepth) keys_[depth_] = Key::kOther;
  }
  void Pop() { --depth_; }
  bool InEventObject() const { return events_depth_ > 0 && depth_ == events_depth_; }
  bool InEvent() const { return events_depth_ > 0 && depth_ == events_depth_; }
  bool InArgs() const {
    return events_depth_ > 0 && depth_ == events_depth_ + 1 && keys_[events_depth_] == Key::kArgs;
  }
  bool InDeviceProps() const { return depth_ == 3 && keys_[1] == Key::kDeviceProperties; }
  int k0() const { return device_count_ - 1; }

  static Nanos ToNanos(double us, std::int64_t ius, bool integral) {
    return integral ? ius * 1000 : static_cast<Nanos>(std::llround(us * 1000.0));
  }

  // Any number that does not fit an int64 is an error, named with its key; ts and dur are
  // bounded further (kMaxTimeUs), so that ns, ts + dur and the differences the analysis takes
  // never overflow.
  bool OutOfRange(double v) {
    error_ = fmt::format("'{}' = {} is out of range", KeyName(), v);
    return false;
  }
  std::string_view KeyName() const {
    if (depth_ < 0 || depth_ >= kMaxDepth) return "value";
    switch (keys_[depth_]) {
      case Key::kTs: return "ts";
      case Key::kDur: return "dur";
      case Key::kTid: return "tid";
      case Key::kCorrelation: return "correlation";
      default: return "value";
    }
  }
  bool Time(double d, std::int64_t i, bool integral, Nanos* out) {
    const double us = integral ? static_cast<double>(i) : d;
    if (!(std::fabs(us) <= kMaxTimeUs)) {
      error_ = fmt::format("'{}' = {} µs is out of range (at most {:.0e} µs, year 2096)", KeyName(), us,
                           kMaxTimeUs);
      return false;
    }
    *out = ToNanos(d, i, integral);
    return true;
  }
  static int SmallInt(std::int64_t v) {  // -1 (unknown) when it does not fit an int
    return v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max() ? -1 : static_cast<int>(v);
  }

  bool Number(double d, std::int64_t i, bool integral) {
    const std::int64_t whole = integral ? i : static_cast<std::int64_t>(d);
    if (InEvent()) {
      switch (keys_[depth_]) {
        case Key::kTs: ev_.has_ts = true; return Time(d, i, integral, &ev_.ts);
        case Key::kDur: ev_.has_dur = true; return Time(d, i, integral, &ev_.dur);
        case Key::kTid: ev_.tid = whole; break;
        default: break;
      }
    } else if (InArgs()) {
      switch (keys_[depth_]) {
        case Key::kCorrelation: ev_.correlation = whole; break;
        case Key::kTotalReserved: ev_.total_reserved = whole; break;
        case Key::kDeviceType: ev_.device_type = whole; break;
        default: break;
      }
    } else if (InDeviceProps() && k0() == 0) {
      if (keys_[depth_] == Key::kTotalGlobalMem) out_->device_memory = std::max<std::int64_t>(whole, 0);
      else if (keys_[depth_] == Key::kComputeMajor) out_->compute_major = SmallInt(whole);
    } else if (depth_ == 2 && root_is_object_ && keys_[1] == Key::kDistributedInfo) {
      if (keys_[2] == Key::kRank) out_->rank = SmallInt(whole);
      else if (keys_[2] == Key::kWorldSize) out_->world_size = SmallInt(whole);
    }
    return true;
  }

  std::int64_t InternTid(const std::string& s) {
    auto [it, inserted] = tid_ids_.emplace(s, -static_cast<std::int64_t>(tid_ids_.size()) - 1);
    return it->second;
  }

  std::int32_t InternKernel(const std::string& name) {
    auto it = kernel_ids_.find(name);
    if (it != kernel_ids_.end()) return it->second;
    auto id = static_cast<std::int32_t>(out_->kernel_names.size());
    out_->kernel_names.push_back(name);
    out_->kernel_classes.push_back(ClassifyKernelName(name));
    kernel_ids_.emplace(name, id);
    return id;
  }

  void Finish() {
    if (ev_.ph == 'i' && ev_.total_reserved >= 0 && ev_.device_type == 1) {
      out_->peak_memory_reserved = std::max(out_->peak_memory_reserved, ev_.total_reserved);
      return;
    }
    if (ev_.ph != 'X' || !ev_.has_ts) return;
    Nanos start = ev_.ts, end = ev_.ts + std::max<Nanos>(ev_.dur, 0);
    ++out_->events_read;
    if (out_->events_read == 1) { out_->first_ts = start; out_->last_ts = end; }
    out_->first_ts = std::min(out_->first_ts, start);
    out_->last_ts = std::max(out_->last_ts, end);
    std::string_view n = ev_.name;
    switch (ev_.cat) {
      case Cat::kCpu:
        if (StartsWith(n, "ProfilerStep#")) {
          ProfilerStep s{-1, start, end, ev_.tid};
          std::string_view num = n.substr(13);
          std::int64_t v = 0;
          bool ok = !num.empty() && num.size() <= 18;  // more digits could overflow
          for (char c : num) {
            if (!ok || c < '0' || c > '9') { ok = false; break; }
            v = v * 10 + (c - '0');
          }
          if (ok) s.number = v;
          out_->steps.push_back(s);
        } else if (StartsWith(n, "enumerate(DataLoader)") || StartsWith(n, "enumerate(DataPipe)")) {
          out_->data_loading.push_back({start, end, ev_.tid});
        } else if (StartsWith(n, "Optimizer.step") || StartsWith(n, "Optimizer.zero_grad")) {
          out_->optimizer.push_back({start, end, ev_.tid});
        } else if (StartsWith(n, "autograd::engine::evaluate_function")) {
          out_->backward.push_back({start, end, ev_.tid});
        }
        break;
      case Cat::kRuntime:
        if (Contains(n, "Synchronize")) out_->synchronisation.push_back({start, end, ev_.tid});
        if (ev_.correlation >= 0) out_->launches.push_back({ev_.correlation, start, end, ev_.tid});
        break;
      case Cat::kKernel:
        out_->gpu.push_back({start, end, ev_.correlation, InternKernel(ev_.name), GpuKind::kKernel});
        break;
      case Cat::kMemcpy:
        out_->gpu.push_back({start, end, ev_.correlation, -1,
                             Contains(n, "HtoD") ? GpuKind::kMemcpyHtoD : GpuKind::kMemcpyOther});
        break;
      case Cat::kMemset:
        out_->gpu.push_back({start, end, ev_.correlation, -1, GpuKind::kMemset});
        break;
      case Cat::kGpuAnnotation:
      case Cat::kOther:
        break;
    }
  }

  ParsedTrace* out_;
  int depth_ = 0;
  std::array<Key, kMaxDepth> keys_{};
  int events_depth_ = 0;
  bool root_is_object_ = false;
  bool saw_events_ = false;
  int device_count_ = 0;
  Current ev_;
  std::string error_;
  std::unordered_map<std::string, std::int64_t> tid_ids_;
  std::unordered_map<std::string, std::int32_t> kernel_ids_;
};

void SortSpans(std::vector<CpuSpan>& v) {
  std::sort(v.begin(), v.end(), [](const CpuSpan& a, const CpuSpan& b) { return a.start < b.start; });
}

Status Finalise(ParsedTrace& t, const KinetoSax& sax) {
  if (!sax.saw_events()) {
    return InvalidArgument(fmt::format(
        "{}: no 'traceEvents' array: not a Chrome-trace JSON from the PyTorch profiler", t.path));
  }
  std::sort(t.steps.begin(), t.steps.end(),
            [](const ProfilerStep& a, const ProfilerStep& b) { return a.start < b.start; });
  SortSpans(t.data_loading);
  SortSpans(t.optimizer);
  SortSpans(t.backward);
  SortSpans(t.synchronisation);
  std::sort(t.gpu.begin(), t.gpu.end(),
            [](const GpuEvent& a, const GpuEvent& b) { return a.start < b.start; });
  std::sort(t.launches.begin(), t.launches.end(),
            [](const Launch& a, const Launch& b) { return a.correlation < b.correlation; });
  return Status::Ok();
}

}  // namespace

KernelClass ClassifyKernelName(std::string_view name) {
  // Heuristics documented in docs/profile.md ("Kernel classes").
  std::string n = Lower(name);
  KernelClass k;
  k.communication = Contains(n, "nccl") || Contains(n, "rccl");
  if (k.communication) return k;
  static constexpr std::string_view kTensorCore[] = {
      "h884", "h1688", "s884", "s1688", "h16816", "s16816", "i8816", "i16832", "hmma", "imma",
      "wgmma", "gmma", "xmma", "tensorop", "nvjet", "_tc_", "tf32", "bf16", "fp16", "f16f16",
      "884gemm", "1688gemm", "16816gemm", "mfma"};
  static constexpr std::string_view kEligible[] = {
      "gemm", "conv", "cutlass", "xmma", "nvjet", "fprop", "dgrad", "wgrad", "matmul",
      "mma", "attention", "flash", "sdpa"};
  for (std::string_view m : kEligible) {
    if (Contains(n, m)) { k.tc_eligible = true; break; }
  }
  // Half-precision element-wise kernels mention fp16/bf16 too; count tensor cores only on
  // GEMM/conv-like kernels, so "bf16" on an add kernel does not read as tensor-core work.
  if (k.tc_eligible) {
    for (std::string_view m : kTensorCore) {
      if (Contains(n, m)) { k.tensor_core = true; break; }
    }
  }
  return k;
}

const Launch* ParsedTrace::FindLaunch(std::int64_t correlation) const {
  if (correlation < 0) return nullptr;
  auto it = std::lower_bound(launches.begin(), launches.end(), correlation,
                             [](const Launch& l, std::int64_t c) { return l.correlation < c; });
  return it != launches.end() && it->correlation == correlation ? &*it : nullptr;
}

Result<ParsedTrace> ParseTraceFile(const std::string& path, std::size_t max_json_bytes) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return InvalidArgument(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  gzbuffer(f, 1 << 18);
  ChunkReader reader(f, max_json_bytes);
  ParsedTrace t;
  t.path = path;
  KinetoSax sax(&t);
  bool ok = false;
  try {
    ok = Json::sax_parse(ChunkIterator(&reader), ChunkIterator(), &sax);
  } catch (const std::exception& e) {  // parsing edge: nlohmann may still throw on odd input
    return InvalidArgument(fmt::format("{}: {}", path, e.what()));
  }
  if (reader.too_large()) {
    return InvalidArgument(fmt::format("{}: more than {} of trace JSON once decompressed, the most `gpuslice "
                                       "profile` reads (record fewer steps: torch.profiler's schedule(active=...))",
                                       path, FormatBytes(static_cast<Bytes>(max_json_bytes))));
  }
  if (!reader.error().empty()) {
    return InvalidArgument(fmt::format("{}: compressed data is damaged or truncated ({}){}{}", path,
                                       reader.error(), sax.error().empty() ? "" : "; ",
                                       sax.error()));
  }
  if (!ok) return InvalidArgument(fmt::format("{}: {}", path, sax.error()));
  GPUSLICE_RETURN_IF_ERROR(Finalise(t, sax));
  return t;
}

Result<ParsedTrace> ParseTraceText(std::string_view json, std::string name) {
  ParsedTrace t;
  t.path = std::move(name);
  KinetoSax sax(&t);
  bool ok = false;
  try {
    ok = Json::sax_parse(json.begin(), json.end(), &sax);
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("{}: {}", t.path, e.what()));
  }
  if (!ok) return InvalidArgument(fmt::format("{}: {}", t.path, sax.error()));
  GPUSLICE_RETURN_IF_ERROR(Finalise(t, sax));
  return t;
}

}  // namespace gpuslice::profile
