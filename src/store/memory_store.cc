// In-memory Store: the fake used by daemon unit tests; same contract as SQLite, no durability
// beyond the process.
#include <algorithm>
#include <map>
#include <mutex>

#include "store/store.h"

namespace gpuslice::store {
namespace {

class MemoryStore final : public Store {
 public:
  Status Commit(const WriteBatch& b) override {
    std::lock_guard lock(mu_);
    for (const auto& j : b.jobs) jobs_[j.id] = PrivateCopy(j);
    for (const auto& s : b.slices) slices_[s.id] = s;
    for (auto e : b.events) {
      e.seq = static_cast<std::int64_t>(events_.size()) + 1;
      events_.push_back(std::move(e));
    }
    samples_.insert(samples_.end(), b.samples.begin(), b.samples.end());
    journal_.insert(journal_.end(), b.journal.begin(), b.journal.end());
    return Status::Ok();
  }
  Status ReplaceJournal(const std::vector<std::string>& entries) override {
    std::lock_guard lock(mu_);
    journal_ = entries;
    return Status::Ok();
  }
  Result<std::optional<JobRecord>> GetJob(JobId id) override {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return std::optional<JobRecord>();
    return std::optional<JobRecord>(it->second);
  }
  Result<std::vector<JobRecord>> ListJobs() override {
    std::lock_guard lock(mu_);
    std::vector<JobRecord> out;
    for (const auto& [id, j] : jobs_) out.push_back(j);
    return out;
  }
  Result<std::vector<SliceRecord>> ListSlices(bool active_only) override {
    std::lock_guard lock(mu_);
    std::vector<SliceRecord> out;
    for (const auto& [id, s] : slices_) {
      if (!active_only || s.active) out.push_back(s);
    }
    return out;
  }
  Result<std::vector<EventRecord>> ListEvents(std::int64_t after_seq, JobId job,
                                              int limit) override {
    std::lock_guard lock(mu_);
    std::vector<EventRecord> out;
    for (const auto& e : events_) {
      if (static_cast<int>(out.size()) >= limit) break;
      if (e.seq > after_seq && (!job.valid() || e.job == job)) out.push_back(e);
    }
    return out;
  }
  Result<std::vector<SampleRecord>> ListSamples(std::string_view subject, Micros since) override {
    std::lock_guard lock(mu_);
    std::vector<SampleRecord> out;
    for (const auto& s : samples_) {
      if (s.subject == subject && s.time >= since) out.push_back(s);
    }
    return out;
  }
  Result<std::vector<SampleSum>> SumSamples(Micros from, Micros to, Micros width) override {
    std::lock_guard lock(mu_);
    return SumSamplePoints(samples_, from, to, width);
  }
  Result<std::optional<Micros>> OldestSample() override {
    std::lock_guard lock(mu_);
    std::optional<Micros> t;
    for (const auto& s : samples_) t = t ? std::min(*t, s.time) : s.time;
    return t;
  }
  Result<std::int64_t> CompactSamples(Micros before, Micros width, int max_points) override {
    std::lock_guard lock(mu_);
    // The same bound as SQLite's (whole buckets only, up to the bucket holding the
    // max_points-th oldest candidate), so both stores fold alike.
    std::vector<Micros> times;
    for (const auto& s : samples_) {
      if (s.time <= before && s.resolution < width) times.push_back(s.time);
    }
    if (times.empty()) return std::int64_t{0};
    std::sort(times.begin(), times.end());
    const Micros cut = CompactionCut(times, before, width, max_points);
    std::vector<SampleRecord> fold, keep;
    for (auto& s : samples_) {
      (s.time <= cut && s.resolution < width ? fold : keep).push_back(std::move(s));
    }
    const auto n = static_cast<std::int64_t>(fold.size());
    for (auto& r : FoldSamples(fold, width)) keep.push_back(std::move(r));
    samples_ = std::move(keep);
    return n;
  }
  Result<std::int64_t> DropSamples(Micros before, int max_points) override {
    std::lock_guard lock(mu_);
    std::int64_t n = 0;
    std::erase_if(samples_, [&](const SampleRecord& s) {
      if (s.time >= before || n >= max_points) return false;
      ++n;
      return true;
    });
    return n;
  }
  Result<std::vector<std::string>> ReadJournal() override {
    std::lock_guard lock(mu_);
    return journal_;
  }
  Result<std::optional<std::string>> GetMeta(std::string_view key) override {
    std::lock_guard lock(mu_);
    auto it = meta_.find(std::string(key));
    if (it == meta_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  Status PutMeta(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mu_);
    meta_[std::string(key)] = std::string(value);
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::map<JobId, JobRecord> jobs_;
  std::map<SliceId, SliceRecord> slices_;
  std::vector<EventRecord> events_;
  std::vector<SampleRecord> samples_;
  std::vector<std::string> journal_;
  std::map<std::string, std::string> meta_;
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() { return std::make_unique<MemoryStore>(); }

}  // namespace gpuslice::store
