#include "api/views.h"

#include <limits>
#include <type_traits>

#include <fmt/format.h>

#include "store/codec.h"

namespace gpuslice::api {
namespace {

using json = nlohmann::json;

// Reads the fields of one view; the first error sticks and names the view and the field.
class Reader {
 public:
  Reader(const json& o, std::string where) : o_(o), where_(std::move(where)) {
    if (!o_.is_object()) Fail("", "expected an object", o_);
  }

  template <class T>
  void Req(const char* name, T* out) {
    if (!st_.ok()) return;
    auto it = o_.find(name);
    if (it == o_.end()) return Fail(name, "missing", json());
    Read(name, *it, out);
  }
  // Absent or null: unknown.
  template <class T>
  void Opt(const char* name, std::optional<T>* out) {
    if (!st_.ok()) return;
    auto it = o_.find(name);
    if (it == o_.end() || it->is_null()) {
      out->reset();
      return;
    }
    T v{};
    Read(name, *it, &v);
    if (st_.ok()) *out = std::move(v);
  }
  void Bytes(const char* name, std::string* out) {
    if (!st_.ok()) return;
    auto it = o_.find(name);
    if (it == o_.end()) return Fail(name, "missing", json());
    auto b = store::BytesFromJson(*it, fmt::format("{}: field '{}'", where_, name));
    if (!b.ok()) {
      st_ = InvalidArgument(b.status().message());
      return;
    }
    *out = *std::move(b);
  }
  void BytesList(const char* name, std::vector<std::string>* out) {
    if (!st_.ok()) return;
    auto it = o_.find(name);
    if (it == o_.end() || !it->is_array()) return Fail(name, "expected a list", it == o_.end() ? json() : *it);
    out->clear();
    for (std::size_t i = 0; i < it->size(); ++i) {
      auto b = store::BytesFromJson((*it)[i], fmt::format("{}: field '{}' element {}", where_, name, i));
      if (!b.ok()) {
        st_ = InvalidArgument(b.status().message());
        return;
      }
      out->push_back(*std::move(b));
    }
  }
  void Raw(const char* name, json* out) {
    if (!st_.ok()) return;
    auto it = o_.find(name);
    *out = it == o_.end() ? json() : *it;
  }
  // A list of objects, each read by `read(Reader&, T*)` with a Reader of its own, so that an
  // error names the element.
  template <class T, class F>
  void Objects(const char* name, std::vector<T>* out, F read) {
    if (!st_.ok()) return;
    auto it = o_.find(name);
    if (it == o_.end() || !it->is_array()) return Fail(name, "expected a list", it == o_.end() ? json() : *it);
    out->clear();
    for (std::size_t i = 0; i < it->size(); ++i) {
      Reader r((*it)[i], fmt::format("{}: field '{}' element {}", where_, name, i));
      T x{};
      read(r, &x);
      if (!r.status().ok()) {
        st_ = r.status();
        return;
      }
      out->push_back(std::move(x));
    }
  }
  const Status& status() const { return st_; }

 private:
  void Fail(const char* name, const char* what, const json& v) {
    if (!st_.ok()) return;
    std::string shown = v.is_null() ? "" : v.dump();
    if (shown.size() > 64) shown = shown.substr(0, 61) + "...";
    st_ = InvalidArgument(*name == '\0' ? fmt::format("{}: {}", where_, what)
                          : shown.empty() ? fmt::format("{}: field '{}': {}", where_, name, what)
                                          : fmt::format("{}: field '{}' = {}: {}", where_, name, shown, what));
  }
  template <class T>
  void Read(const char* name, const json& v, T* out) {
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return Fail(name, "expected true or false", v);
      *out = v.get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) return Fail(name, "expected a string", v);
      *out = v.get<std::string>();
    } else if constexpr (std::is_same_v<T, double>) {
      if (!v.is_number()) return Fail(name, "expected a number", v);
      *out = v.get<double>();
    } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
        return Fail(name, "expected a non-negative integer", v);
      }
      const std::uint64_t x = v.get<std::uint64_t>();
      if (x > std::numeric_limits<T>::max()) return Fail(name, "out of range", v);
      *out = static_cast<T>(x);
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() >
                                                                    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
        return Fail(name, "expected an integer", v);
      }
      const std::int64_t x = v.get<std::int64_t>();
      if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) return Fail(name, "out of range", v);
      *out = static_cast<T>(x);
    } else if constexpr (std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<std::uint64_t>>) {
      if (!v.is_array()) return Fail(name, "expected a list of integers", v);
      out->clear();
      for (const auto& e : v) {
        typename T::value_type x = 0;
        Read(name, e, &x);
        if (!st_.ok()) return;
        out->push_back(x);
      }
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (!v.is_array()) return Fail(name, "expected a list of strings", v);
      out->clear();
      for (const auto& e : v) {
        std::string x;
        Read(name, e, &x);
        if (!st_.ok()) return;
        out->push_back(std::move(x));
      }
    } else {
      static_assert(sizeof(T) == 0, "no reader for this type");
    }
  }

  const json& o_;
  std::string where_;
  Status st_;
};

template <class T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// How errors name a view before its fields are read: `what` and the view's `key` field as
// sent ("job 12", "queue \"gpu\""), or "?" without one. Bytes that are not UTF-8 are replaced,
// so naming a view never fails.
std::string ViewName(const char* what, const json& j, const char* key) {
  return fmt::format("{} {}", what,
                     j.is_object() && j.contains(key) ? j[key].dump(-1, ' ', false, json::error_handler_t::replace)
                                                      : "?");
}

}  // namespace

json JobView::ToJson() const {
  json args = json::array();
  for (const auto& a : argv) args.push_back(store::BytesToJson(a));
  json o = {
      {"id", id},
      {"user", user},
      {"uid", uid},
      {"gid", gid},
      {"queue", queue},
      {"kind", kind},
      {"gpus", gpus},
      {"milli", milli},
      {"memory", memory},
      {"time_limit_us", time_limit_us},
      {"model", model},
      {"argv", args},
      {"cwd", store::BytesToJson(cwd)},
      {"state", state},
      {"reason", reason},
      {"warning", warning},
      {"warn_deadline_us", warn_deadline_us},
      {"submit_time_us", submit_time_us},
      {"start_time_us", start_time_us},
      {"end_time_us", end_time_us},
      {"deadline_us", deadline_us},
      {"slice", slice},
      {"pid", pid},
      {"requeues", requeues},
      {"log_path", store::BytesToJson(log_path)},
  };
  o["exit_code"] = OrNull(exit_code);
  o["exit_signal"] = OrNull(exit_signal);
  o["time_left_us"] = OrNull(time_left_us);
  o["activity"] = OrNull(activity);
  o["activity_basis"] = OrNull(activity_basis);
  o["pending_reason"] = pending_reason;
  o["activity_report"] = activity_report;
  o["idle_state"] = OrNull(idle_state);
  o["idle_state_text"] = OrNull(idle_state_text);
  o["idle_reclaim_mode"] = OrNull(idle_reclaim_mode);
  o["warning_kind"] = OrNull(warning_kind);
  o["idle_since_us"] = OrNull(idle_since_us);
  o["mig_instance"] = OrNull(mig_instance);
  if (idempotency_key) o["idempotency_key"] = *idempotency_key;
  if (team) o["team"] = *team;
  if (argv_dropped_bytes) o["argv_dropped_bytes"] = *argv_dropped_bytes;
  return o;
}

Result<JobView> JobView::FromJson(const json& j) {
  JobView v;
  Reader r(j, ViewName("job", j, "id"));
  r.Req("id", &v.id);
  r.Req("user", &v.user);
  r.Req("uid", &v.uid);
  r.Req("gid", &v.gid);
  r.Req("queue", &v.queue);
  r.Req("kind", &v.kind);
  r.Req("gpus", &v.gpus);
  r.Req("milli", &v.milli);
  r.Req("memory", &v.memory);
  r.Req("time_limit_us", &v.time_limit_us);
  r.Req("model", &v.model);
  r.BytesList("argv", &v.argv);
  r.Bytes("cwd", &v.cwd);
  r.Req("state", &v.state);
  r.Req("reason", &v.reason);
  r.Req("warning", &v.warning);
  r.Req("warn_deadline_us", &v.warn_deadline_us);
  r.Req("submit_time_us", &v.submit_time_us);
  r.Req("start_time_us", &v.start_time_us);
  r.Req("end_time_us", &v.end_time_us);
  r.Req("deadline_us", &v.deadline_us);
  r.Req("slice", &v.slice);
  r.Req("pid", &v.pid);
  r.Req("requeues", &v.requeues);
  r.Bytes("log_path", &v.log_path);
  r.Opt("exit_code", &v.exit_code);
  r.Opt("exit_signal", &v.exit_signal);
  r.Opt("time_left_us", &v.time_left_us);
  r.Opt("activity", &v.activity);
  r.Opt("activity_basis", &v.activity_basis);
  r.Raw("pending_reason", &v.pending_reason);
  r.Raw("activity_report", &v.activity_report);
  r.Opt("idle_state", &v.idle_state);
  r.Opt("idle_state_text", &v.idle_state_text);
  r.Opt("idle_reclaim_mode", &v.idle_reclaim_mode);
  r.Opt("warning_kind", &v.warning_kind);
  r.Opt("idle_since_us", &v.idle_since_us);
  r.Opt("mig_instance", &v.mig_instance);
  r.Opt("idempotency_key", &v.idempotency_key);
  r.Opt("team", &v.team);
  r.Opt("argv_dropped_bytes", &v.argv_dropped_bytes);
  GPUSLICE_RETURN_IF_ERROR(r.status());
  if (v.requeues < 0) {
    return InvalidArgument(fmt::format("job {}: field 'requeues' = {}: expected a non-negative integer", v.id, v.requeues));
  }
  if (!v.activity_report.is_null() && !v.activity_report.is_object()) {
    return InvalidArgument(fmt::format("job {}: field 'activity_report': expected null or an object", v.id));
  }
  if (!v.pending_reason.is_null() &&
      (!v.pending_reason.is_object() || !v.pending_reason.contains("text") || !v.pending_reason["text"].is_string())) {
    return InvalidArgument(fmt::format("job {}: field 'pending_reason': expected null or an object with a "
                                       "string 'text'", v.id));
  }
  return v;
}

json SliceView::ToJson() const {
  json o = {{"id", id},
            {"job", job},
            {"kind", kind},
            {"devices", devices},
            {"uuids", uuids},
            {"milli", milli},
            {"memory_cap", memory_cap},
            {"mps_thread_percent", mps_thread_percent},
            {"mig", mig},
            {"active", active},
            {"created_us", created_us},
            {"released_us", released_us}};
  if (cap_mechanism) o["cap_mechanism"] = *cap_mechanism;
  if (mps_user) o["mps_user"] = *mps_user;
  if (figures) {
    const Figures& f = *figures;
    o["util_percent"] = OrNull(f.util_percent);
    o["memory_used"] = OrNull(f.memory_used);
    o["idle_seconds"] = OrNull(f.idle_seconds);
    o["activity"] = OrNull(f.activity);
    o["activity_basis"] = OrNull(f.activity_basis);
    o["idle_state"] = f.idle_state;
    if (f.user) o["user"] = *f.user;
    if (f.queue) o["queue"] = *f.queue;
    o["used_milli"] = OrNull(f.used_milli);
    o["idle_since_us"] = OrNull(f.idle_since_us);
    o["idle_warning_at_us"] = OrNull(f.idle_warning_at_us);
    o["idle_reclaim_at_us"] = OrNull(f.idle_reclaim_at_us);
    o["protected_by"] = OrNull(f.protected_by);
  }
  return o;
}

Result<SliceView> SliceView::FromJson(const json& j) {
  SliceView v;
  Reader r(j, ViewName("slice", j, "id"));
  r.Req("id", &v.id);
  r.Req("job", &v.job);
  r.Req("kind", &v.kind);
  r.Req("devices", &v.devices);
  r.Req("uuids", &v.uuids);
  r.Req("milli", &v.milli);
  r.Req("memory_cap", &v.memory_cap);
  r.Req("mps_thread_percent", &v.mps_thread_percent);
  r.Req("mig", &v.mig);
  r.Req("active", &v.active);
  r.Req("created_us", &v.created_us);
  r.Req("released_us", &v.released_us);
  r.Opt("cap_mechanism", &v.cap_mechanism);
  r.Opt("mps_user", &v.mps_user);
  if (j.is_object() && j.contains("idle_state")) {
    Figures f;
    r.Opt("util_percent", &f.util_percent);
    r.Opt("memory_used", &f.memory_used);
    r.Opt("idle_seconds", &f.idle_seconds);
    r.Opt("activity", &f.activity);
    r.Opt("activity_basis", &f.activity_basis);
    r.Req("idle_state", &f.idle_state);
    r.Opt("user", &f.user);
    r.Opt("queue", &f.queue);
    r.Opt("used_milli", &f.used_milli);
    r.Opt("idle_since_us", &f.idle_since_us);
    r.Opt("idle_warning_at_us", &f.idle_warning_at_us);
    r.Opt("idle_reclaim_at_us", &f.idle_reclaim_at_us);
    r.Opt("protected_by", &f.protected_by);
    v.figures = std::move(f);
  }
  GPUSLICE_RETURN_IF_ERROR(r.status());
  return v;
}

json QueueView::ToJson() const {
  return json{{"name", name},
              {"default_kind", default_kind},
              {"allowed_kinds", allowed_kinds},
              {"priority", priority},
              {"time_limit_us", time_limit_us},
              {"max_duration_us", max_duration_us},
              {"reserve_after_us", reserve_after_us},
              {"idle_reclaim", idle_reclaim},
              {"idle_window_us", idle_window_us},
              {"idle_grace_us", idle_grace_us},
              {"idle_reclaim_mode", idle_reclaim_mode},
              {"idle_signals", idle_signals},
              {"pending", pending},
              {"running", running},
              {"oldest_wait_us", oldest_wait_us},
              {"user_max_jobs", user_max_jobs},
              {"user_max_milli", user_max_milli}};
}

Result<QueueView> QueueView::FromJson(const json& j) {
  QueueView v;
  Reader r(j, ViewName("queue", j, "name"));
  r.Req("name", &v.name);
  r.Req("default_kind", &v.default_kind);
  r.Req("allowed_kinds", &v.allowed_kinds);
  r.Req("priority", &v.priority);
  r.Req("time_limit_us", &v.time_limit_us);
  r.Req("max_duration_us", &v.max_duration_us);
  r.Req("reserve_after_us", &v.reserve_after_us);
  r.Req("idle_reclaim", &v.idle_reclaim);
  r.Req("idle_window_us", &v.idle_window_us);
  r.Req("idle_grace_us", &v.idle_grace_us);
  r.Req("idle_reclaim_mode", &v.idle_reclaim_mode);
  r.Req("idle_signals", &v.idle_signals);
  r.Req("pending", &v.pending);
  r.Req("running", &v.running);
  r.Req("oldest_wait_us", &v.oldest_wait_us);
  // Newer fields: absent from an older daemon's answer (no caps shown).
  std::optional<int> max_jobs;
  std::optional<MilliGpu> max_milli;
  r.Opt("user_max_jobs", &max_jobs);
  r.Opt("user_max_milli", &max_milli);
  v.user_max_jobs = max_jobs.value_or(0);
  v.user_max_milli = max_milli.value_or(0);
  GPUSLICE_RETURN_IF_ERROR(r.status());
  return v;
}

json DeviceView::ToJson() const {
  json layout = json::array();
  for (const MigPart& p : mig_layout) {
    layout.push_back({{"profile", p.profile}, {"start", p.start}, {"name", p.name}, {"memory", p.memory},
                      {"milli", p.milli}, {"slice", p.slice}});
  }
  json o{{"index", index},
         {"uuid", uuid},
         {"model", model},
         {"memory", memory},
         {"mode", mode},
         {"draining", draining},
         {"used_milli", used_milli},
         {"held_milli", held_milli},
         {"used_memory", used_memory},
         {"clients", clients},
         {"slices", slices},
         {"mig_layout", layout}};
  o["reserved_for"] = OrNull(reserved_for);
  o["util_percent"] = OrNull(util_percent);
  o["memory_used"] = OrNull(memory_used);
  if (reserved_memory) o["reserved_memory"] = *reserved_memory;
  if (context_reserve) o["context_reserve"] = *context_reserve;
  if (cap_shared) o["cap_shared"] = *cap_shared;
  if (cap_mps) o["cap_mps"] = *cap_mps;
  o["mps_user"] = OrNull(mps_user);
  o["drained"] = OrNull(drained);
  o["mig_admin"] = mig_admin;
  o["mig_capable"] = mig_capable;
  return o;
}

Result<DeviceView> DeviceView::FromJson(const json& j) {
  DeviceView v;
  Reader r(j, ViewName("device", j, "index"));
  r.Req("index", &v.index);
  r.Req("uuid", &v.uuid);
  r.Req("model", &v.model);
  r.Req("memory", &v.memory);
  r.Req("mode", &v.mode);
  r.Req("draining", &v.draining);
  r.Req("used_milli", &v.used_milli);
  std::optional<MilliGpu> held;
  r.Opt("held_milli", &held);  // absent from an older daemon: its used_milli
  v.held_milli = held.value_or(v.used_milli);
  r.Opt("reserved_for", &v.reserved_for);
  r.Req("used_memory", &v.used_memory);
  r.Req("clients", &v.clients);
  r.Req("slices", &v.slices);
  r.Objects("mig_layout", &v.mig_layout, [](Reader& p, MigPart* out) {
    p.Req("profile", &out->profile);
    p.Req("start", &out->start);
    std::optional<std::string> name;
    std::optional<Bytes> memory;
    std::optional<MilliGpu> milli;
    std::optional<std::uint64_t> slice;
    p.Opt("name", &name);
    p.Opt("memory", &memory);
    p.Opt("milli", &milli);
    p.Opt("slice", &slice);
    out->name = name.value_or("");
    out->memory = memory.value_or(0);
    out->milli = milli.value_or(0);
    out->slice = slice.value_or(0);
  });
  r.Opt("util_percent", &v.util_percent);
  r.Opt("memory_used", &v.memory_used);
  r.Opt("reserved_memory", &v.reserved_memory);
  r.Opt("context_reserve", &v.context_reserve);
  r.Opt("cap_shared", &v.cap_shared);
  r.Opt("cap_mps", &v.cap_mps);
  r.Opt("mps_user", &v.mps_user);
  r.Opt("drained", &v.drained);
  if (j.contains("mig_admin")) r.Req("mig_admin", &v.mig_admin);  // older daemons have none
  if (j.contains("mig_capable")) r.Req("mig_capable", &v.mig_capable);
  GPUSLICE_RETURN_IF_ERROR(r.status());
  return v;
}

json EventView::ToJson() const {
  return json{{"seq", seq}, {"time_us", time_us}, {"job", job}, {"type", type}, {"message", message}};
}

Result<EventView> EventView::FromJson(const json& j) {
  EventView v;
  Reader r(j, ViewName("event", j, "seq"));
  r.Req("seq", &v.seq);
  r.Req("time_us", &v.time_us);
  r.Req("job", &v.job);
  r.Req("type", &v.type);
  r.Req("message", &v.message);
  GPUSLICE_RETURN_IF_ERROR(r.status());
  return v;
}

namespace {
template <class V>
Result<std::vector<V>> ListFromJson(const json& answer, const char* key) {
  if (!answer.is_object() || !answer.contains(key) || !answer[key].is_array()) {
    return InvalidArgument(fmt::format("daemon answer: field '{}': expected a list", key));
  }
  std::vector<V> out;
  for (std::size_t i = 0; i < answer[key].size(); ++i) {
    auto v = V::FromJson(answer[key][i]);
    if (!v.ok()) return v.status().WithContext(fmt::format("daemon answer: {}[{}]", key, i));
    out.push_back(*std::move(v));
  }
  return out;
}
}  // namespace

Result<std::vector<JobView>> JobsFromJson(const json& answer, const char* key) {
  return ListFromJson<JobView>(answer, key);
}
Result<std::vector<SliceView>> SlicesFromJson(const json& answer, const char* key) {
  return ListFromJson<SliceView>(answer, key);
}

Result<std::vector<QueueView>> QueuesFromJson(const json& answer, const char* key) {
  return ListFromJson<QueueView>(answer, key);
}
Result<std::vector<DeviceView>> DevicesFromJson(const json& answer, const char* key) {
  return ListFromJson<DeviceView>(answer, key);
}
Result<std::vector<EventView>> EventsFromJson(const json& answer, const char* key) {
  return ListFromJson<EventView>(answer, key);
}

}  // namespace gpuslice::api
