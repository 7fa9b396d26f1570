// SQLite Store. One connection guarded by a mutex: the daemon is the only writer and reads
// from the store only at start-up and for history, so one connection is enough.
// WAL mode. synchronous=NORMAL (Sync::kProcess) already makes a committed batch survive any
// crash of the daemon (the WAL write is done before COMMIT returns); synchronous=FULL
// (Sync::kMachine) adds an fsync per commit so it also survives power loss.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <mutex>

#include <fmt/format.h>
#include <sqlite3.h>

#include <spdlog/spdlog.h>

#include "store/codec.h"
#include "store/schema.h"
#include "store/store.h"

namespace gpuslice::store {
namespace {


// RAII prepared statement with typed binds.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status status() const {
    if (rc_ == SQLITE_OK) return Status::Ok();
    return Internal(fmt::format("sqlite prepare: {}", sqlite3_errmsg(db_)));
  }
  void Bind(int i, std::int64_t v) { sqlite3_bind_int64(st_, i, v); }
  void Bind(int i, std::string_view v) {
    sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  // SQLITE_ROW -> true, SQLITE_DONE -> false; anything else is an error.
  Result<bool> Step() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Internal(fmt::format("sqlite step: {}", sqlite3_errmsg(db_)));
  }
  Status Run() {
    auto r = Step();
    if (!r.ok()) return r.status();
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
    return Status::Ok();
  }
  std::int64_t Int(int col) { return sqlite3_column_int64(st_, col); }
  sqlite3_stmt* raw() { return st_; }
  std::string Text(int col) {
    const unsigned char* t = sqlite3_column_text(st_, col);
    return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
  }
  // Every remaining row, each made into a T by `read(*this)`, which returns a T or a
  // Result<T>; the first step or row that fails is the answer.
  template <class T, class F>
  Result<std::vector<T>> ReadAll(F read) {
    std::vector<T> out;
    while (true) {
      GPUSLICE_ASSIGN_OR_RETURN(bool row, Step());
      if (!row) return out;
      GPUSLICE_ASSIGN_OR_RETURN(T v, Result<T>(read(*this)));
      out.push_back(std::move(v));
    }
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  int rc_;
};

// Row readers, one per column list the queries below select.

// seq, time, job, type, message
EventRecord EventFromRow(Stmt& s) {
  return EventRecord{s.Int(0), s.Int(1), JobId(static_cast<std::uint64_t>(s.Int(2))), s.Text(3), s.Text(4)};
}

// time, subject, util_permille, memory_used, span, known, idle, resolution
SampleRecord SampleFromRow(Stmt& s) {
  return SampleRecord{s.Int(0), s.Text(1), static_cast<int>(s.Int(2)), s.Int(3),
                      s.Int(4), s.Int(5), s.Int(6), s.Int(7)};
}

class SqliteStore final : public Store {
 public:
  SqliteStore(sqlite3* db, Sync sync) : db_(db), sync_(sync) {}
  ~SqliteStore() override { sqlite3_close(db_); }

  // A reader (OpenSqliteReader): the writer made the schema; this connection only reads.
  Status InitReader() {
    sqlite3_busy_timeout(db_, 5000);
    return Exec("PRAGMA query_only=ON");
  }

  // Refuses a newer or foreign store before anything is written (journal_mode=WAL writes the
  // header), then migrates an older one (schema.h), keeping a copy of it as it was.
  Status Init(const std::string& path) {
    sqlite3_busy_timeout(db_, 5000);
    GPUSLICE_RETURN_IF_ERROR(CheckSchema(db_, path));
    if (Status st = Settings(); !st.ok()) return st.WithContext(path + ": ");
    GPUSLICE_RETURN_IF_ERROR(MigrateSchema(db_, path, [&](int from) { return KeepCopy(path, from); }));
    if (Status st = EnableIncrementalVacuum(); !st.ok()) return st.WithContext(path + ": ");
    return Status::Ok();
  }

  Status Settings() {
    GPUSLICE_RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
    GPUSLICE_RETURN_IF_ERROR(Exec(sync_ == Sync::kMachine ? "PRAGMA synchronous=FULL"
                                                          : "PRAGMA synchronous=NORMAL"));
    GPUSLICE_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=ON"));
    // Overwritten rows (an ended job's environment) are zeroed, not left in free space.
    return Exec("PRAGMA secure_delete=ON");
  }

  // Freed pages (an ended job's environment, folded samples) are kept for reuse unless given
  // back: with auto_vacuum=INCREMENTAL, ReclaimSpace returns them to the file system in small
  // steps. A store made before this setting is rebuilt once (VACUUM) to take it. The WAL file
  // is cut back to 64 MiB after checkpoints, so a burst of writes does not keep it large.
  Status EnableIncrementalVacuum() {
    GPUSLICE_RETURN_IF_ERROR(Exec("PRAGMA journal_size_limit=67108864"));
    {
      // Finalized before VACUUM, which refuses to run beside an unfinished statement.
      Stmt s(db_, "PRAGMA auto_vacuum");
      GPUSLICE_RETURN_IF_ERROR(s.status());
      GPUSLICE_ASSIGN_OR_RETURN(bool row, s.Step());
      if (row && s.Int(0) == 2) return Status::Ok();  // 2: incremental
    }
    GPUSLICE_RETURN_IF_ERROR(Exec("PRAGMA auto_vacuum=INCREMENTAL"));
    return Exec("VACUUM");
  }

  Result<std::int64_t> ReclaimSpace(int max_pages) override {
    std::lock_guard lock(mu_);
    std::int64_t free_pages = 0;
    {
      Stmt s(db_, "PRAGMA freelist_count");
      GPUSLICE_RETURN_IF_ERROR(s.status());
      GPUSLICE_ASSIGN_OR_RETURN(bool row, s.Step());
      free_pages = row ? s.Int(0) : 0;
    }
    if (free_pages == 0 || max_pages <= 0) return 0;
    GPUSLICE_RETURN_IF_ERROR(Exec(fmt::format("PRAGMA incremental_vacuum({})", max_pages).c_str()));
    return std::min<std::int64_t>(free_pages, max_pages);
  }

  // Before a migration: the store as it was, in <path>.pre-v<from> (private), unless an
  // earlier attempt left one (it is the same store: a failed migration changes nothing).
  Status KeepCopy(const std::string& path, int from) {
    const std::string copy = fmt::format("{}.pre-v{}", path, from);
    std::error_code ec;
    if (!std::filesystem::exists(copy, ec)) {
      char* quoted = sqlite3_mprintf("VACUUM INTO %Q", copy.c_str());
      Status st = Exec(quoted);
      sqlite3_free(quoted);
      if (!st.ok()) return st.WithContext(fmt::format("{}: keeping a copy before the migration: ", path));
      std::filesystem::permissions(copy, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write, ec);
    }
    spdlog::warn("{}: schema version {} -> {}: migrating in one transaction; the store as it was "
                 "is kept in {}", path, from, SchemaVersion(), copy);
    return Status::Ok();
  }

  Result<std::vector<SampleSum>> SumSamples(Micros from, Micros to, Micros width) override {
    std::lock_guard lock(mu_);
    // Grouped in SQL: a year of history is a few hundred thousand points, summed without
    // leaving SQLite. Unknown points (util -1) add span but no known time.
    // Over a long range a plain scan of the table beats the time index (whose every hit is
    // a lookup in the table): measured by bench/report.
    const std::string sql = fmt::format(
        "SELECT subject, CASE WHEN ?3 > 0 THEN ?1 + ((time - ?1) / ?3) * ?3 ELSE ?1 END AS b, "
        "SUM(span), SUM(CASE WHEN util_permille >= 0 THEN known ELSE 0 END), SUM(idle), "
        "SUM(CASE WHEN util_permille >= 0 THEN util_permille * known ELSE 0 END) "
        "FROM samples {} WHERE time >= ?1 AND time < ?2 GROUP BY subject, b ORDER BY subject, b",
        to - from > 30 * 24 * kHour ? "NOT INDEXED" : "INDEXED BY samples_time");
    Stmt s(db_, sql.c_str());
    GPUSLICE_RETURN_IF_ERROR(s.status());
    s.Bind(1, from);
    s.Bind(2, to);
    s.Bind(3, width);
    return s.ReadAll<SampleSum>(
        [](Stmt& r) { return SampleSum{r.Text(0), r.Int(1), r.Int(2), r.Int(3), r.Int(4), r.Int(5)}; });
  }

  Result<std::vector<EventRecord>> ListEventsOfType(std::string_view type, Micros before) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT seq, time, job, type, message FROM events WHERE type = ? AND time < ? ORDER BY seq");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    s.Bind(1, type);
    s.Bind(2, before);
    return s.ReadAll<EventRecord>(EventFromRow);
  }

  Result<std::vector<JobRecord>> ListJobsBrief() override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT id, user, json_extract(data, '$.queue'), state, json_extract(data, '$.submit_time_us'), "
                "json_extract(data, '$.start_time_us'), json_extract(data, '$.end_time_us'), "
                "json_extract(data, '$.deadline_us'), json_extract(data, '$.slice') FROM jobs ORDER BY id");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    return s.ReadAll<JobRecord>([](Stmt& r) -> Result<JobRecord> {
      JobRecord j;
      j.id = JobId(static_cast<std::uint64_t>(r.Int(0)));
      j.user = r.Text(1);
      j.queue = r.Text(2);
      GPUSLICE_ASSIGN_OR_RETURN(j.state, ParseJobState(r.Text(3)));
      j.submit_time = r.Int(4);
      j.start_time = r.Int(5);
      j.end_time = r.Int(6);
      j.deadline = r.Int(7);
      j.slice = SliceId(static_cast<std::uint64_t>(r.Int(8)));
      return j;
    });
  }

  Result<std::vector<SliceRecord>> ListSlicesBrief() override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT id, job, json_extract(data, '$.kind'), json_extract(data, '$.devices'), "
                "json_extract(data, '$.milli'), active, json_extract(data, '$.created_us'), "
                "json_extract(data, '$.released_us') FROM slices ORDER BY id");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    return s.ReadAll<SliceRecord>([](Stmt& row) -> Result<SliceRecord> {
      SliceRecord r;
      r.id = SliceId(static_cast<std::uint64_t>(row.Int(0)));
      r.job = JobId(static_cast<std::uint64_t>(row.Int(1)));
      GPUSLICE_ASSIGN_OR_RETURN(r.kind, SliceKindFromText(row.Text(2)));
      // "[0,3]": small integers only (the store wrote it).
      const std::string devs = row.Text(3);
      int v = -1;
      for (char c : devs) {
        if (c >= '0' && c <= '9') {
          v = (v < 0 ? 0 : v * 10) + (c - '0');
        } else if (v >= 0) {
          r.devices.push_back(v);
          v = -1;
        }
      }
      r.milli = row.Int(4);
      r.active = row.Int(5) != 0;
      r.created = row.Int(6);
      r.released = row.Int(7);
      return r;
    });
  }

  Result<std::optional<Micros>> OldestSample() override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT MIN(time) FROM samples");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    GPUSLICE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row || sqlite3_column_type(s.raw(), 0) == SQLITE_NULL) return std::optional<Micros>();
    return std::optional<Micros>(s.Int(0));
  }

  Result<std::int64_t> CompactSamples(Micros before, Micros width, int max_points) override {
    std::lock_guard lock(mu_);
    // Where this step stops: found outside the write transaction, read-only.
    std::vector<Micros> times;
    {
      Stmt s(db_, "SELECT time FROM samples INDEXED BY samples_resolution WHERE time <= ? AND resolution < ? ORDER BY time LIMIT ?");
      GPUSLICE_RETURN_IF_ERROR(s.status());
      s.Bind(1, before);
      s.Bind(2, width);
      s.Bind(3, static_cast<std::int64_t>(std::max(max_points, 1)));
      GPUSLICE_ASSIGN_OR_RETURN(times, s.ReadAll<Micros>([](Stmt& r) { return r.Int(0); }));
    }
    if (times.empty()) return std::int64_t{0};
    const Micros cut = CompactionCut(times, before, width, max_points);
    if (cut < times.front()) return std::int64_t{0};
    GPUSLICE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    auto n = FoldLocked(cut, width);
    if (!n.ok()) {
      (void)Exec("ROLLBACK");
      return n.status();
    }
    GPUSLICE_RETURN_IF_ERROR(Exec("COMMIT"));
    return n;
  }

  Result<std::int64_t> DropSamples(Micros before, int max_points) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "DELETE FROM samples WHERE rowid IN "
                "(SELECT rowid FROM samples WHERE time < ? ORDER BY time LIMIT ?)");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    s.Bind(1, before);
    s.Bind(2, static_cast<std::int64_t>(max_points));
    GPUSLICE_RETURN_IF_ERROR(s.Run());
    return static_cast<std::int64_t>(sqlite3_changes(db_));
  }

  Status Commit(const WriteBatch& b) override {
    if (b.empty()) return Status::Ok();
    std::lock_guard lock(mu_);
    GPUSLICE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = Write(b);
    if (!st.ok()) {
      (void)Exec("ROLLBACK");
      return st;
    }
    return Exec("COMMIT");
  }

  Result<std::optional<JobRecord>> GetJob(JobId id) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT data FROM jobs WHERE id = ?");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    s.Bind(1, static_cast<std::int64_t>(id.value()));
    GPUSLICE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return std::optional<JobRecord>();
    GPUSLICE_ASSIGN_OR_RETURN(JobRecord j, ParseJob(s.Text(0)));
    return std::optional<JobRecord>(std::move(j));
  }

  Result<std::vector<JobRecord>> ListJobs() override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT data FROM jobs ORDER BY id");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    return s.ReadAll<JobRecord>([](Stmt& r) { return ParseJob(r.Text(0)); });
  }

  Result<std::vector<SliceRecord>> ListSlices(bool active_only) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, active_only ? "SELECT data FROM slices WHERE active = 1 ORDER BY id"
                            : "SELECT data FROM slices ORDER BY id");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    return s.ReadAll<SliceRecord>([](Stmt& r) -> Result<SliceRecord> {
      nlohmann::json j = nlohmann::json::parse(r.Text(0), nullptr, false);
      if (j.is_discarded()) return Status(StatusCode::kDataLoss, "slices: unreadable row");
      return SliceFromJson(j);
    });
  }

  Result<std::vector<EventRecord>> ListEvents(std::int64_t after_seq, JobId job,
                                              int limit) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, job.valid() ? "SELECT seq, time, job, type, message FROM events "
                              "WHERE seq > ? AND job = ? ORDER BY seq LIMIT ?"
                            : "SELECT seq, time, job, type, message FROM events "
                              "WHERE seq > ? AND ? = 0 ORDER BY seq LIMIT ?");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    s.Bind(1, after_seq);
    s.Bind(2, static_cast<std::int64_t>(job.value()));
    s.Bind(3, static_cast<std::int64_t>(limit));
    return s.ReadAll<EventRecord>(EventFromRow);
  }

  Result<std::vector<SampleRecord>> ListSamples(std::string_view subject, Micros since) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT time, subject, util_permille, memory_used, span, known, idle, resolution "
                "FROM samples WHERE subject = ? AND time >= ? ORDER BY time, rowid");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    s.Bind(1, subject);
    s.Bind(2, since);
    return s.ReadAll<SampleRecord>(SampleFromRow);
  }

  Result<std::vector<std::string>> ReadJournal() override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT entry FROM journal ORDER BY seq");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    return s.ReadAll<std::string>([](Stmt& r) { return r.Text(0); });
  }

  Status ReplaceJournal(const std::vector<std::string>& entries) override {
    std::lock_guard lock(mu_);
    GPUSLICE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = Exec("DELETE FROM journal");
    if (st.ok()) {
      st = InsertAll("INSERT INTO journal(entry) VALUES(?)", entries,
                     [](Stmt& s, const std::string& e) { s.Bind(1, e); });
    }
    if (!st.ok()) {
      (void)Exec("ROLLBACK");
      return st;
    }
    GPUSLICE_RETURN_IF_ERROR(Exec("COMMIT"));
    // The freed pages are reused by later entries; the WAL is folded back so it does not
    // keep the old journal's pages around.
    // Without waiting: TRUNCATE would wait (busy timeout) for a reader's snapshot, e.g. a
    // report on the reader connection; the WAL is folded by a later checkpoint instead.
    sqlite3_busy_timeout(db_, 0);
    (void)Exec("PRAGMA wal_checkpoint(TRUNCATE)");
    sqlite3_busy_timeout(db_, 5000);
    return Status::Ok();
  }

  Result<std::optional<std::string>> GetMeta(std::string_view key) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "SELECT value FROM meta WHERE key = ?");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    s.Bind(1, key);
    GPUSLICE_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(s.Text(0));
  }

  Status PutMeta(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "INSERT INTO meta(key, value) VALUES(?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
    GPUSLICE_RETURN_IF_ERROR(s.status());
    s.Bind(1, key);
    s.Bind(2, value);
    return s.Run();
  }

 private:
  Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      Status st = Internal(fmt::format("sqlite: {}", err ? err : "error"));
      sqlite3_free(err);
      return st;
    }
    return Status::Ok();
  }

  // Runs `sql` once per row, its values bound by `bind(stmt, row)`; stops at the first error.
  // Prepares nothing for no rows.
  template <class T, class F>
  Status InsertAll(const char* sql, const std::vector<T>& rows, F bind) {
    if (rows.empty()) return Status::Ok();
    Stmt s(db_, sql);
    GPUSLICE_RETURN_IF_ERROR(s.status());
    for (const T& r : rows) {
      bind(s, r);
      GPUSLICE_RETURN_IF_ERROR(s.Run());
    }
    return Status::Ok();
  }

  Status Write(const WriteBatch& b) {
    GPUSLICE_RETURN_IF_ERROR(InsertAll(
        "INSERT INTO jobs(id, state, user, data) VALUES(?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET state = excluded.state, data = excluded.data",
        b.jobs, [](Stmt& s, const JobRecord& j) {
          s.Bind(1, static_cast<std::int64_t>(j.id.value()));
          s.Bind(2, JobStateName(j.state));
          s.Bind(3, j.user);
          s.Bind(4, JobToJson(PrivateCopy(j)).dump());
        }));
    GPUSLICE_RETURN_IF_ERROR(InsertAll(
        "INSERT INTO slices(id, job, active, data) VALUES(?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET active = excluded.active, data = excluded.data",
        b.slices, [](Stmt& s, const SliceRecord& r) {
          s.Bind(1, static_cast<std::int64_t>(r.id.value()));
          s.Bind(2, static_cast<std::int64_t>(r.job.value()));
          s.Bind(3, r.active ? 1 : 0);
          s.Bind(4, SliceToJson(r).dump());
        }));
    GPUSLICE_RETURN_IF_ERROR(InsertAll(
        "INSERT INTO events(time, job, type, message) VALUES(?, ?, ?, ?)", b.events,
        [](Stmt& s, const EventRecord& e) {
          s.Bind(1, e.time);
          s.Bind(2, static_cast<std::int64_t>(e.job.value()));
          s.Bind(3, e.type);
          s.Bind(4, e.message);
        }));
    GPUSLICE_RETURN_IF_ERROR(InsertAll(
        "INSERT INTO samples(time, subject, util_permille, memory_used, span, known, "
        "idle, resolution) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
        b.samples, [](Stmt& s, const SampleRecord& r) {
          s.Bind(1, r.time);
          s.Bind(2, r.subject);
          s.Bind(3, r.util_permille);
          s.Bind(4, r.memory_used);
          s.Bind(5, r.span);
          s.Bind(6, r.known);
          s.Bind(7, r.idle);
          s.Bind(8, r.resolution);
        }));
    return InsertAll("INSERT INTO journal(entry) VALUES(?)", b.journal,
                     [](Stmt& s, const std::string& e) { s.Bind(1, e); });
  }

  // Replaces the points with time <= cut and a resolution finer than `width` by their folds.
  // Requires mu_ and an open transaction.
  Result<std::int64_t> FoldLocked(Micros cut, Micros width) {
    std::vector<SampleRecord> pts;
    {
      Stmt s(db_, "SELECT time, subject, util_permille, memory_used, span, known, idle, resolution "
                  "FROM samples INDEXED BY samples_resolution WHERE time <= ? AND resolution < ?");
      GPUSLICE_RETURN_IF_ERROR(s.status());
      s.Bind(1, cut);
      s.Bind(2, width);
      GPUSLICE_ASSIGN_OR_RETURN(pts, s.ReadAll<SampleRecord>(SampleFromRow));
    }
    {
      Stmt d(db_, "DELETE FROM samples INDEXED BY samples_resolution WHERE time <= ? AND resolution < ?");
      GPUSLICE_RETURN_IF_ERROR(d.status());
      d.Bind(1, cut);
      d.Bind(2, width);
      GPUSLICE_RETURN_IF_ERROR(d.Run());
    }
    WriteBatch b;
    b.samples = FoldSamples(pts, width);
    GPUSLICE_RETURN_IF_ERROR(Write(b));
    return static_cast<std::int64_t>(pts.size());
  }

  static Result<JobRecord> ParseJob(const std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return Status(StatusCode::kDataLoss, "jobs: unreadable row");
    return JobFromJson(j);
  }

  std::mutex mu_;
  sqlite3* db_;
  Sync sync_;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& state_dir, Sync sync) {
  std::error_code ec;
  if (!std::filesystem::exists(state_dir, ec)) {
    std::filesystem::create_directories(state_dir, ec);
    if (!ec) std::filesystem::permissions(state_dir, std::filesystem::perms::owner_all, ec);
  }
  if (ec) {
    return InvalidArgument(fmt::format("--state-dir '{}': cannot create: {}", state_dir,
                                       ec.message()));
  }
  std::string path = state_dir + "/gpuslice.db";
  // Created private before SQLite sees it (whatever the umask), and made private if an older
  // version left it readable; SQLite creates -wal and -shm with the database's mode.
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return Unavailable(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  struct stat sb {};
  if (fstat(fd, &sb) == 0 && (sb.st_mode & 077) != 0) (void)fchmod(fd, 0600);
  close(fd);
  for (const char* suffix : {"-wal", "-shm"}) {
    std::string side = path + suffix;
    if (stat(side.c_str(), &sb) == 0 && (sb.st_mode & 077) != 0) (void)chmod(side.c_str(), 0600);
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                             SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    Status st = Unavailable(fmt::format("{}: cannot open: {}", path,
                                        db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return st;
  }
  auto store = std::make_unique<SqliteStore>(db, sync);
  Status st = store->Init(path);
  if (!st.ok()) return st;
  return std::unique_ptr<Store>(std::move(store));
}

Result<std::unique_ptr<Store>> OpenSqliteReader(const std::string& state_dir) {
  const std::string path = state_dir + "/gpuslice.db";
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    Status st = Unavailable(fmt::format("{}: cannot open for reading: {}", path,
                                        db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return st;
  }
  auto store = std::make_unique<SqliteStore>(db, Sync::kProcess);
  Status st = store->InitReader();
  if (!st.ok()) return st.WithContext(path + ": ");
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace gpuslice::store
