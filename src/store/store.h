#pragma once
// Store: the daemon's durable state — jobs, slices, the event log shown to users, downsampled
// utilisation samples, and the journal of scheduler inputs (replayed at restart so the pure
// scheduler is rebuilt exactly). Two implementations: SQLite in WAL mode (sqlite_store.h) and
// in memory (memory_store.h); one contract suite (tests/store/contract_test.cc) runs on both.
//
// Writes go through Commit(WriteBatch): all-or-nothing, and durable when it returns OK (against
// a crash of the daemon always; against power loss with Sync::kMachine), so the API
// acknowledges nothing that a crash could lose. Implementations are thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/slice_kind.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::store {

// A job's life. Terminal states never change again.
enum class JobState {
  kPending,    // accepted, waiting for a slice
  kStarting,   // slice chosen, process being created (never exec'd unless the pid is stored)
  kRunning,
  kStopping,   // SIGTERM sent (cancel, time limit, reclaim); slice held until processes are gone
  kSucceeded,  // exited 0
  kFailed,     // exited non-zero / by signal, or could not start
  kCancelled,
  kTimedOut,
  kReclaimed,  // idle reclaim
  kLost,       // result unknown: it ended and no exit status was recorded (its exec stub was
               // killed), or its processes vanished while the daemon was down
  kRejected,   // can never run as asked
};
std::string_view JobStateName(JobState s);
Result<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState s);

struct JobRecord {
  JobId id;
  std::string user;
  std::int64_t uid = -1;
  std::int64_t gid = -1;
  std::string queue;
  // The request as submitted (empty / zero: the queue's default).
  std::optional<SliceKind> kind;
  int gpus = 0;
  MilliGpu milli = 0;
  Bytes memory = 0;
  Micros time_limit = 0;
  std::string model;
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;  // the submitter's environment

  JobState state = JobState::kPending;
  std::string reason;        // why it ended / was rejected / is stopping
  std::string warning;       // latest warning shown by `ps` (idle or time limit)
  Micros warn_deadline = 0;
  Micros submit_time = 0;
  Micros start_time = 0;
  Micros end_time = 0;
  Micros deadline = 0;       // time-limit end (0: none)
  SliceId slice;
  int pid = 0;               // process-group leader; 0 before start
  std::uint64_t pid_start_ticks = 0;  // /proc/<pid>/stat starttime: tells a reused pid apart
  std::optional<int> exit_code;       // as the exec stub recorded it; unset: unknown
  std::optional<int> exit_signal;
  std::string log_path;
  // Times it was put back in the queue because it never started (the daemon stopped between
  // the start's commit and the go-ahead; docs/api.md "Durability and recovery"); the
  // daemon fails the job instead after a few.
  int never_started_requeues = 0;
  // Submit's idempotency key (docs/api.md): a second submit of the same uid with the same key
  // answers this job instead of making another. "" : none given.
  std::string idempotency_key;
  // The submitter's file mode creation mask for the job's processes (0..0777); -1: none given
  // (the daemon applies 022, never its own 077).
  int umask = -1;
  // Bytes of argv not kept once the job ended (PrivateCopy keeps kEndedArgvBytes of it).
  std::int64_t argv_dropped = 0;

  friend bool operator==(const JobRecord&, const JobRecord&) = default;
};

// What an ended job keeps of its argv, in bytes (whole elements first, then a cut one): the
// command stays readable in `ps --all` and `show`, while a user submitting and cancelling
// megabyte commands cannot grow the history (store and daemon memory) by megabytes a job.
inline constexpr std::size_t kEndedArgvBytes = 4096;

struct SliceRecord {
  SliceId id;
  JobId job;
  SliceKind kind = SliceKind::kShared;  // on disk: its name ("whole", "mig", "mps", "shared")
  std::vector<int> devices{};
  std::vector<std::string> uuids{};
  MilliGpu milli = 0;
  Bytes memory_cap = 0;
  int mps_thread_percent = 0;
  std::optional<MigPlacement> mig{};  // mig slices; on disk: "profile=<id> start=<n>", "" for none
  bool active = true;                // false once the processes are gone and it is freed
  Micros created = 0;
  Micros released = 0;
  friend bool operator==(const SliceRecord&, const SliceRecord&) = default;
};

struct EventRecord {
  std::int64_t seq = 0;   // assigned by the store, increasing
  Micros time = 0;
  JobId job;              // 0: not about one job
  std::string type;       // "submit", "start", "warn", "stop", "reclaim", "exit", ...
  std::string message;
  friend bool operator==(const EventRecord&, const EventRecord&) = default;
};

// A downsampled utilisation point for a device ("device/0") or slice ("slice/3"). It covers
// (time - span, time]: util_permille is the mean over the `known` microseconds of it whose
// utilisation was measured (-1 when none was), `idle` the microseconds measured idle. Totals
// (span, known, idle, util x known) survive compaction (FoldSamples) within rounding; a
// point stored without a span (older daemons) counts for nothing in reports.
struct SampleRecord {
  Micros time = 0;
  std::string subject;
  int util_permille = 0;
  Bytes memory_used = 0;
  Micros span = 0;
  Micros known = 0;
  Micros idle = 0;
  Micros resolution = 0;  // 0: as sampled; else the bucket width compaction folded it into
  friend bool operator==(const SampleRecord&, const SampleRecord&) = default;
};

// Sums of the points of one subject whose time lies in one bucket (SumSamples).
struct SampleSum {
  std::string subject;
  Micros bucket = 0;            // bucket start: from + k * width (from when width is 0)
  Micros span = 0;
  Micros known = 0;
  Micros idle = 0;
  std::int64_t util_known = 0;  // sum of util_permille x known: permille-microseconds
  friend bool operator==(const SampleSum&, const SampleSum&) = default;
};

// Folds `points` (any subjects, any order) into one point per subject and bucket
// ((time - 1) / width): spans, known and idle add up, utilisation is the known-weighted mean
// (rounded to the permille), memory the maximum, time the bucket's end. Pure.
std::vector<SampleRecord> FoldSamples(const std::vector<SampleRecord>& points, Micros width);
// Where one CompactSamples step stops: the end of the bucket holding the max_points-th of the
// sorted candidate times (at least the first bucket's end), never past `before`'s bucket.
Micros CompactionCut(const std::vector<Micros>& sorted_times, Micros before, Micros width,
                     int max_points);
// The SumSamples answer computed from `points` (the memory store's, and the contract's).
std::vector<SampleSum> SumSamplePoints(const std::vector<SampleRecord>& points, Micros from,
                                       Micros to, Micros width);

// Everything one Commit writes, atomically. Jobs and slices are upserted by id; events,
// samples and journal entries are appended (in order).
struct WriteBatch {
  std::vector<JobRecord> jobs{};
  std::vector<SliceRecord> slices{};
  std::vector<EventRecord> events{};
  std::vector<SampleRecord> samples{};
  std::vector<std::string> journal{};
  bool empty() const {
    return jobs.empty() && slices.empty() && events.empty() && samples.empty() && journal.empty();
  }
};

class Store {
 public:
  virtual ~Store() = default;

  // Atomic and durable: after OK, a crash of this process keeps all of it; after an error,
  // none of it is visible. A job's environment (tokens, keys) is kept only while the job may
  // still start: a job committed in a terminal state is stored without it (PrivateCopy).
  virtual Status Commit(const WriteBatch& batch) = 0;

  virtual Result<std::optional<JobRecord>> GetJob(JobId id) = 0;
  virtual Result<std::vector<JobRecord>> ListJobs() = 0;  // by id
  virtual Result<std::vector<SliceRecord>> ListSlices(bool active_only) = 0;  // by id
  // Events with seq > after_seq (optionally of one job), oldest first, at most `limit`.
  virtual Result<std::vector<EventRecord>> ListEvents(std::int64_t after_seq, JobId job,
                                                      int limit) = 0;
  virtual Result<std::vector<SampleRecord>> ListSamples(std::string_view subject,
                                                        Micros since) = 0;
  virtual Result<std::vector<std::string>> ReadJournal() = 0;  // oldest first
  // Journal compaction: replaces the whole journal with `entries`, atomically (a crash keeps
  // the old journal or the new one, never a mix).
  virtual Status ReplaceJournal(const std::vector<std::string>& entries) = 0;

  // History for reports and its retention (store/retention.h). Not pure virtual, so wrappers
  // written before them still compile; both stores implement them.
  // Sums of the points with from <= time < to, per subject and per bucket of `width`
  // (0: one bucket for the whole range), ordered by subject then bucket.
  virtual Result<std::vector<SampleSum>> SumSamples(Micros from, Micros to, Micros width);
  // The time of the oldest stored point (nullopt: none).
  virtual Result<std::optional<Micros>> OldestSample();
  // One bounded step of compaction: folds points with time <= before and a resolution finer
  // than `width` into `width` buckets (FoldSamples), whole buckets only, at least one bucket
  // and about `max_points` points per call, in one transaction. Returns the points folded
  // (0: nothing left to do).
  virtual Result<std::int64_t> CompactSamples(Micros before, Micros width, int max_points);
  // Jobs and slices with only the fields a report reads (job: id, user, queue, state and its
  // times, slice; slice: id, job, kind, devices, milli, active, created, released); the rest
  // left empty. SQLite extracts them in SQL: a year of records, without parsing each whole.
  // The defaults give the full records.
  virtual Result<std::vector<JobRecord>> ListJobsBrief() { return ListJobs(); }
  virtual Result<std::vector<SliceRecord>> ListSlicesBrief() { return ListSlices(false); }
  // Events of one type with time < before, oldest first (the report's "wait" events). The
  // default filters ListEvents.
  virtual Result<std::vector<EventRecord>> ListEventsOfType(std::string_view type, Micros before);
  // Deletes up to `max_points` of the oldest points with time < before; returns how many.
  virtual Result<std::int64_t> DropSamples(Micros before, int max_points);
  // Gives free pages back to the file system, at most `max_pages` per call (SQLite: incremental
  // vacuum, so the file shrinks after environments of ended jobs were dropped); returns the
  // pages given back. The default (memory store) has nothing to give back.
  virtual Result<std::int64_t> ReclaimSpace(int max_pages);

  // Small key/value settings (e.g. the scheduler seed), written outside batches.
  virtual Result<std::optional<std::string>> GetMeta(std::string_view key) = 0;
  virtual Status PutMeta(std::string_view key, std::string_view value) = 0;
};

// What a store (and the daemon's memory) keeps of `j`: all of it, less the environment and all
// but kEndedArgvBytes of argv once the job has ended (nothing starts it again; a requeued job is
// pending, not terminal).
JobRecord PrivateCopy(const JobRecord& j);

// How hard Commit pushes a batch to disk (SQLite WAL either way).
enum class Sync {
  kProcess,  // synchronous=NORMAL: survives a crash or kill -9 of the daemon at any instant;
             // the last commits may be lost if the machine loses power. No fsync per commit.
  kMachine,  // synchronous=FULL: also survives power loss; one fsync per commit.
};

// Opens <state_dir>/gpuslice.db (creating the directory, mode 0700, and schema as needed).
// The database and its -wal/-shm files are mode 0600 (SQLite gives the latter the database's
// mode), and freed space is zeroed (secure_delete), so an ended job's environment does not
// linger in free pages.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& state_dir,
                                               Sync sync = Sync::kMachine);
// A second, read-only connection to the same <state_dir>/gpuslice.db, for long reads beside
// the daemon's writer (the usage report over a year of history): in WAL mode a reader and the
// writer never wait for each other, so a report does not hold up the daemon's commits. It sees
// what was committed when each read began. Every write through it fails (read-only). The
// database must exist (OpenSqliteStore made it).
Result<std::unique_ptr<Store>> OpenSqliteReader(const std::string& state_dir);
// `n` such read-only connections behind one Store: each read borrows a free one (or waits for
// one), so concurrent readers of history (reports, events, samples) run side by side, beside
// the writer and not behind each other. Writes fail, as on one reader.
Result<std::unique_ptr<Store>> OpenSqliteReaders(const std::string& state_dir, int n);
std::unique_ptr<Store> NewMemoryStore();

}  // namespace gpuslice::store
