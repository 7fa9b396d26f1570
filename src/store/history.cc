// Stored utilisation history: folding points into coarser buckets (compaction) and summing
// them for reports. Pure functions, shared by both stores so they answer alike.
#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "store/store.h"

namespace gpuslice::store {
namespace {

// Round-half-up division of non-negative integers.
std::int64_t DivRound(std::int64_t a, std::int64_t b) { return b == 0 ? 0 : (a + b / 2) / b; }

}  // namespace

std::vector<SampleRecord> FoldSamples(const std::vector<SampleRecord>& points, Micros width) {
  struct Acc {
    Micros span = 0, known = 0, idle = 0;
    std::int64_t util_known = 0;
    Bytes mem = -1;
  };
  std::map<std::pair<std::string, Micros>, Acc> acc;
  for (const auto& p : points) {
    // A point covers (time - span, time]: its bucket is the one holding its end.
    const Micros bucket = p.time > 0 ? (p.time - 1) / width : 0;
    Acc& a = acc[{p.subject, bucket}];
    a.span += p.span;
    a.idle += p.idle;
    if (p.util_permille >= 0 && p.known > 0) {
      a.known += p.known;
      a.util_known += static_cast<std::int64_t>(p.util_permille) * p.known;
    }
    a.mem = std::max(a.mem, p.memory_used);
  }
  std::vector<SampleRecord> out;
  out.reserve(acc.size());
  for (const auto& [key, a] : acc) {
    SampleRecord r;
    r.subject = key.first;
    r.time = (key.second + 1) * width;
    r.util_permille = a.known > 0 ? static_cast<int>(DivRound(a.util_known, a.known)) : -1;
    r.memory_used = a.mem;
    r.span = a.span;
    r.known = a.known;
    r.idle = a.idle;
    r.resolution = width;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<SampleSum> SumSamplePoints(const std::vector<SampleRecord>& points, Micros from,
                                       Micros to, Micros width) {
  std::map<std::pair<std::string, Micros>, SampleSum> acc;
  for (const auto& p : points) {
    if (p.time < from || p.time >= to) continue;
    const Micros bucket = width > 0 ? from + (p.time - from) / width * width : from;
    SampleSum& s = acc[{p.subject, bucket}];
    s.subject = p.subject;
    s.bucket = bucket;
    s.span += p.span;
    s.idle += p.idle;
    if (p.util_permille >= 0 && p.known > 0) {
      s.known += p.known;
      s.util_known += static_cast<std::int64_t>(p.util_permille) * p.known;
    }
  }
  std::vector<SampleSum> out;
  out.reserve(acc.size());
  for (auto& [k, s] : acc) out.push_back(std::move(s));
  return out;
}

Micros CompactionCut(const std::vector<Micros>& sorted_times, Micros before, Micros width,
                     int max_points) {
  auto end_of = [&](Micros t) { return ((t > 0 ? (t - 1) / width : 0) + 1) * width; };
  const std::size_t nth = std::min<std::size_t>(
      sorted_times.size() - 1, static_cast<std::size_t>(std::max(max_points, 1)) - 1);
  // Only whole buckets: the last bucket ending at or before `before`.
  const Micros last_whole = before / width * width;
  return std::min(end_of(sorted_times[nth]), last_whole);
}

Result<std::vector<EventRecord>> Store::ListEventsOfType(std::string_view type, Micros before) {
  GPUSLICE_ASSIGN_OR_RETURN(auto all, ListEvents(0, JobId(), std::numeric_limits<int>::max()));
  std::erase_if(all, [&](const EventRecord& e) { return e.type != type || e.time >= before; });
  return all;
}

Result<std::vector<SampleSum>> Store::SumSamples(Micros, Micros, Micros) {
  return Unsupported("this store keeps no sample history");
}
Result<std::optional<Micros>> Store::OldestSample() {
  return Unsupported("this store keeps no sample history");
}
Result<std::int64_t> Store::CompactSamples(Micros, Micros, int) {
  return Unsupported("this store keeps no sample history");
}
Result<std::int64_t> Store::DropSamples(Micros, int) {
  return Unsupported("this store keeps no sample history");
}
Result<std::int64_t> Store::ReclaimSpace(int) { return 0; }

}  // namespace gpuslice::store
