#include "daemon/journal.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

json LayoutJson(const MigLayout& l) {
  json a = json::array();
  for (const auto& p : l) a.push_back({p.profile_id, p.start});
  return a;
}

MigLayout LayoutFrom(const json& a) {
  MigLayout l;
  for (const auto& p : a) l.push_back(MigPlacement{p.at(0).get<int>(), p.at(1).get<int>()});
  return l;
}

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

std::string EncodeEvent(const sched::Event& e) {
  json o = std::visit(
      Overloaded{
          [](const sched::DeviceAdded& d) -> json {
            return {{"t", "device_added"}, {"now", d.now},
                    {"node", d.device.node.value()}, {"index", d.device.index.value()},
                    {"uuid", d.uuid}, {"model", d.model}, {"mig_capable", d.mig_capable},
                    {"mig_enabled", d.mig_enabled}, {"layout", LayoutJson(d.mig_layout)}};
          },
          [](const sched::DeviceRemoved& d) -> json {
            return {{"t", "device_removed"}, {"now", d.now},
                    {"node", d.device.node.value()}, {"index", d.device.index.value()}};
          },
          [](const sched::Submit& s) -> json {
            json r = {{"gpus", s.request.gpus}, {"milli", s.request.milli},
                      {"memory", s.request.memory}, {"time_limit", s.request.time_limit},
                      {"model", s.request.model}};
            if (s.request.kind) r["kind"] = sched::SliceKindName(*s.request.kind);
            return {{"t", "submit"}, {"now", s.now}, {"job", s.job.value()},
                    {"user", s.user}, {"queue", s.queue}, {"request", r}};
          },
          [](const sched::Finish& f) -> json {
            return {{"t", "finish"}, {"now", f.now}, {"job", f.job.value()}};
          },
          [](const sched::Cancel& c) -> json {
            return {{"t", "cancel"}, {"now", c.now}, {"job", c.job.value()}};
          },
          [](const sched::Sample& s) -> json {
            json a = json::array();
            for (const auto& x : s.slices) {
              json e = {x.slice.value(), x.sm_percent, x.memory_percent, x.processes};
              // Which figures were measured, only when not all (older entries have 4 fields).
              const int unknown = (x.sm_known ? 0 : 1) | (x.memory_known ? 0 : 2) | (x.processes_known ? 0 : 4);
              if (unknown != 0 || x.memory_change != sched::Activity::kUnknown ||
                  x.external != sched::Activity::kUnknown) {
                e.push_back(unknown);
                e.push_back(static_cast<int>(x.memory_change));
                e.push_back(static_cast<int>(x.external));
              }
              a.push_back(e);
            }
            return {{"t", "sample"}, {"now", s.now}, {"slices", a}};
          },
          [](const sched::Tick& t) -> json { return {{"t", "tick"}, {"now", t.now}}; },
          [](const sched::ReconfigureDone& r) -> json {
            return {{"t", "reconfigure_done"}, {"now", r.now},
                    {"node", r.device.node.value()}, {"index", r.device.index.value()},
                    {"ok", r.ok}, {"layout", LayoutJson(r.layout)}, {"error", r.error}};
          },
      },
      e);
  return o.dump();
}

Result<sched::Event> DecodeEvent(std::string_view text) {
  json o = json::parse(text, nullptr, false);
  if (o.is_discarded()) {
    return Status(StatusCode::kDataLoss, fmt::format("journal entry '{}': not JSON", text));
  }
  try {
    const std::string t = o.at("t").get<std::string>();
    const Micros now = o.at("now").get<Micros>();
    auto ref = [&] {
      return sched::DeviceRef{NodeId(o.at("node").get<std::uint32_t>()),
                              DeviceIndex(o.at("index").get<std::uint32_t>())};
    };
    if (t == "device_added") {
      return sched::Event(sched::DeviceAdded{now, ref(), o.at("uuid").get<std::string>(),
                                             o.at("model").get<std::string>(),
                                             o.at("mig_capable").get<bool>(),
                                             o.at("mig_enabled").get<bool>(),
                                             LayoutFrom(o.at("layout"))});
    }
    if (t == "device_removed") return sched::Event(sched::DeviceRemoved{now, ref()});
    if (t == "submit") {
      const json& r = o.at("request");
      sched::JobRequest req;
      if (r.contains("kind")) {
        GPUSLICE_ASSIGN_OR_RETURN(req.kind, sched::ParseSliceKind(r.at("kind").get<std::string>()));
      }
      req.gpus = r.at("gpus").get<int>();
      req.milli = r.at("milli").get<MilliGpu>();
      req.memory = r.at("memory").get<Bytes>();
      req.time_limit = r.at("time_limit").get<Micros>();
      req.model = r.at("model").get<std::string>();
      return sched::Event(sched::Submit{now, JobId(o.at("job").get<std::uint64_t>()),
                                        o.at("user").get<std::string>(),
                                        o.at("queue").get<std::string>(), req});
    }
    if (t == "finish") return sched::Event(sched::Finish{now, JobId(o.at("job").get<std::uint64_t>())});
    if (t == "cancel") return sched::Event(sched::Cancel{now, JobId(o.at("job").get<std::uint64_t>())});
    if (t == "sample") {
      sched::Sample s{now, {}};
      for (const auto& x : o.at("slices")) {
        sched::SliceSample ss{SliceId(x.at(0).get<std::uint64_t>()), x.at(1).get<int>(),
                              x.at(2).get<int>(), x.at(3).get<int>()};
        if (x.size() > 4) {
          const int unknown = x.at(4).get<int>();
          auto activity = [&](const json& v) -> Result<sched::Activity> {
            const int n = v.get<int>();
            if (n < 0 || n > 2) {
              return Status(StatusCode::kDataLoss, fmt::format("journal entry '{}': activity {}", text, n));
            }
            return static_cast<sched::Activity>(n);
          };
          ss.sm_known = (unknown & 1) == 0;
          ss.memory_known = (unknown & 2) == 0;
          ss.processes_known = (unknown & 4) == 0;
          GPUSLICE_ASSIGN_OR_RETURN(ss.memory_change, activity(x.at(5)));
          GPUSLICE_ASSIGN_OR_RETURN(ss.external, activity(x.at(6)));
        }
        s.slices.push_back(ss);
      }
      return sched::Event(std::move(s));
    }
    if (t == "tick") return sched::Event(sched::Tick{now});
    if (t == "reconfigure_done") {
      return sched::Event(sched::ReconfigureDone{now, ref(), o.at("ok").get<bool>(),
                                                 LayoutFrom(o.at("layout")),
                                                 o.at("error").get<std::string>()});
    }
    return Status(StatusCode::kDataLoss, fmt::format("journal entry: unknown type '{}'", t));
  } catch (const json::exception& e) {
    return Status(StatusCode::kDataLoss, fmt::format("journal entry '{}': {}", text, e.what()));
  }
}

bool CanChangeState(const sched::Event& e) {
  if (std::holds_alternative<sched::Tick>(e)) return false;
  // Any slice's sample may change state: an idle-looking one ends an "unmeasured" stretch.
  if (const auto* s = std::get_if<sched::Sample>(&e)) return !s->slices.empty();
  return true;
}

}  // namespace gpuslice::daemon
