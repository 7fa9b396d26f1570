// OpenSqliteReaders: several read-only connections (OpenSqliteReader) behind one Store. Each
// call borrows one connection for its duration; the pool is thread-safe.
#include <condition_variable>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "store/store.h"

namespace gpuslice::store {
namespace {

class ReaderPool final : public Store {
 public:
  explicit ReaderPool(std::vector<std::unique_ptr<Store>> readers) : readers_(std::move(readers)) {
    for (std::size_t i = 0; i < readers_.size(); ++i) free_.push_back(i);
  }

  Status Commit(const WriteBatch&) override { return ReadOnly(); }
  Status ReplaceJournal(const std::vector<std::string>&) override { return ReadOnly(); }
  Status PutMeta(std::string_view, std::string_view) override { return ReadOnly(); }
  Result<std::int64_t> CompactSamples(Micros, Micros, int) override { return ReadOnly(); }
  Result<std::int64_t> DropSamples(Micros, int) override { return ReadOnly(); }
  Result<std::int64_t> ReclaimSpace(int) override { return std::int64_t{0}; }

  Result<std::optional<JobRecord>> GetJob(JobId id) override {
    return With([&](Store& s) { return s.GetJob(id); });
  }
  Result<std::vector<JobRecord>> ListJobs() override {
    return With([&](Store& s) { return s.ListJobs(); });
  }
  Result<std::vector<SliceRecord>> ListSlices(bool active_only) override {
    return With([&](Store& s) { return s.ListSlices(active_only); });
  }
  Result<std::vector<EventRecord>> ListEvents(std::int64_t after_seq, JobId job, int limit) override {
    return With([&](Store& s) { return s.ListEvents(after_seq, job, limit); });
  }
  Result<std::vector<SampleRecord>> ListSamples(std::string_view subject, Micros since) override {
    return With([&](Store& s) { return s.ListSamples(subject, since); });
  }
  Result<std::vector<std::string>> ReadJournal() override {
    return With([&](Store& s) { return s.ReadJournal(); });
  }
  Result<std::vector<SampleSum>> SumSamples(Micros from, Micros to, Micros width) override {
    return With([&](Store& s) { return s.SumSamples(from, to, width); });
  }
  Result<std::optional<Micros>> OldestSample() override {
    return With([&](Store& s) { return s.OldestSample(); });
  }
  Result<std::vector<JobRecord>> ListJobsBrief() override {
    return With([&](Store& s) { return s.ListJobsBrief(); });
  }
  Result<std::vector<SliceRecord>> ListSlicesBrief() override {
    return With([&](Store& s) { return s.ListSlicesBrief(); });
  }
  Result<std::vector<EventRecord>> ListEventsOfType(std::string_view type, Micros before) override {
    return With([&](Store& s) { return s.ListEventsOfType(type, before); });
  }
  Result<std::optional<std::string>> GetMeta(std::string_view key) override {
    return With([&](Store& s) { return s.GetMeta(key); });
  }

 private:
  static Status ReadOnly() { return FailedPrecondition("a read-only connection of the store cannot write"); }

  template <class F>
  auto With(F f) -> decltype(f(std::declval<Store&>())) {
    std::size_t i;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return !free_.empty(); });
      i = free_.back();
      free_.pop_back();
    }
    auto out = f(*readers_[i]);
    {
      std::lock_guard lock(mu_);
      free_.push_back(i);
    }
    cv_.notify_one();
    return out;
  }

  std::vector<std::unique_ptr<Store>> readers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::size_t> free_;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteReaders(const std::string& state_dir, int n) {
  if (n < 1) return InvalidArgument(fmt::format("readers: {}: at least 1", n));
  std::vector<std::unique_ptr<Store>> readers;
  for (int i = 0; i < n; ++i) {
    GPUSLICE_ASSIGN_OR_RETURN(auto r, OpenSqliteReader(state_dir));
    readers.push_back(std::move(r));
  }
  return std::unique_ptr<Store>(std::make_unique<ReaderPool>(std::move(readers)));
}

}  // namespace gpuslice::store
