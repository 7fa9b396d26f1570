#pragma once
// SharedStore: a Store that forwards to another one it does not own, so that two Daemons (one
// before and one after a "crash") share one store. Optionally fails every Commit while
// *fail_commits is true, as a full disk would. Thread-safe as the store it forwards to.
// The history calls (SumSamples, ListJobsBrief, ...) are not forwarded: they keep the Store's
// defaults (built on the calls below, or "keeps no sample history").

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace gpuslice::daemon {

class SharedStore : public store::Store {
 public:
  explicit SharedStore(store::Store* s, const bool* fail_commits = nullptr) : s_(s), fail_(fail_commits) {}
  Status Commit(const store::WriteBatch& b) override {
    if (fail_ != nullptr && *fail_) return Internal("disk full (scripted)");
    return s_->Commit(b);
  }
  Result<std::optional<store::JobRecord>> GetJob(JobId id) override { return s_->GetJob(id); }
  Result<std::vector<store::JobRecord>> ListJobs() override { return s_->ListJobs(); }
  Result<std::vector<store::SliceRecord>> ListSlices(bool a) override { return s_->ListSlices(a); }
  Result<std::vector<store::EventRecord>> ListEvents(std::int64_t after, JobId job, int limit) override {
    return s_->ListEvents(after, job, limit);
  }
  Result<std::vector<store::SampleRecord>> ListSamples(std::string_view s, Micros t) override {
    return s_->ListSamples(s, t);
  }
  Result<std::vector<std::string>> ReadJournal() override { return s_->ReadJournal(); }
  Status ReplaceJournal(const std::vector<std::string>& e) override { return s_->ReplaceJournal(e); }
  Result<std::optional<std::string>> GetMeta(std::string_view k) override { return s_->GetMeta(k); }
  Status PutMeta(std::string_view k, std::string_view v) override { return s_->PutMeta(k, v); }

 private:
  store::Store* s_;
  const bool* fail_;
};

}  // namespace gpuslice::daemon
