// An admin's orders to the daemon (root or the config's admin group; src/daemon/admin.cc):
//   gpuslice drain GPU [--reason TEXT] / undrain GPU      no new slices; running ones finish
//   gpuslice mig GPU on|off|auto                          MIG mode through a drain
//   gpuslice hold JOB... / release JOB...                 a pending job waits until released
//   gpuslice requeue JOB [--reason TEXT]                  a running job, stopped and pending again
#include <cstdio>
#include <iostream>
#include <memory>

#include "api/cli.h"
#include "core/text.h"
#include "finish.h"
#include "registry.h"

namespace {

namespace api = gpuslice::api;
namespace cli = gpuslice::cli;
using gpuslice::ForTerminal;

struct OrderFlags {
  api::ClientFlags client;
  std::string reason;
};

int ExitFor(const gpuslice::Status& st) { return cli::Finish(st); }

// POSTs the order; prints one line about its target (or the JSON answer).
int Send(const OrderFlags& f, const std::string& path, nlohmann::json body) {
  if (!f.reason.empty()) body["reason"] = f.reason;
  auto client = api::Connect(f.client);
  if (!client.ok()) return ExitFor(client.status());
  auto r = client->Post(path, body);
  if (!r.ok()) return ExitFor(r.status());
  if (f.client.json) {
    std::cout << r->dump(2) << "\n";
    return cli::kExitOk;
  }
  if (r->contains("device") && (*r)["device"].is_object()) {
    const auto& d = (*r)["device"];
    std::string line = "device " + std::to_string(d.value("index", 0)) + ": mode " + d.value("mode", "?");
    if (d.value("draining", false)) line += " (draining)";
    line += d["drained"].is_string() ? ", drained: " + d["drained"].get<std::string>() : ", not drained";
    line += ", MIG mode decided by " + std::string(d.value("mig_admin", "auto") == "auto" ? "demand" : "an admin (" + d.value("mig_admin", "") + ")");
    std::cout << ForTerminal(line) << "\n";
  } else if (r->contains("job")) {
    const auto& j = (*r)["job"];
    std::string line = "job " + std::to_string(j.value("id", 0)) + ": " + j.value("state", "?");
    if (j.contains("pending_reason") && j["pending_reason"].is_object()) {
      line += ": " + j["pending_reason"].value("message", "");
    } else if (!j.value("reason", "").empty()) {
      line += ": " + j.value("reason", "");
    }
    std::cout << ForTerminal(line) << "\n";
  }
  return cli::kExitOk;
}

std::shared_ptr<OrderFlags> AddFlags(CLI::App* sub, bool reason) {
  auto f = std::make_shared<OrderFlags>();
  sub->add_option("--socket", f->client.socket,
                  "Daemon socket (default $GPUSLICE_SOCKET or /run/gpuslice/gpuslice.sock)");
  sub->add_option("--token-file", f->client.token_file, "Bearer token file (TCP)");
  sub->add_flag("--json", f->client.json, "Machine-readable JSON output");
  if (reason) sub->add_option("--reason", f->reason, "Why (shown with the device or job, at most 200 bytes)");
  return f;
}

}  // namespace

GPUSLICE_COMMAND(admin_orders) {
  constexpr const char* kWho = " (root or the admin group)";
  for (const char* name : {"drain", "undrain"}) {
    const bool drain = std::string(name) == "drain";
    auto* sub = app.add_subcommand(name, drain ? std::string("Drain a GPU: no new slices, running ones finish") + kWho
                                               : std::string("Undrain a GPU: it takes new slices again") + kWho);
    auto f = AddFlags(sub, drain);
    auto gpu = std::make_shared<unsigned>(0);
    sub->add_option("GPU", *gpu, "Device index")->required();
    sub->callback([f, gpu, name, exit_code] {
      *exit_code = Send(*f, "/v1/devices/" + std::to_string(*gpu) + "/" + name, nlohmann::json::object());
    });
  }
  {
    auto* sub = app.add_subcommand("mig", std::string("Put a GPU in or out of MIG mode through a drain, or give "
                                                      "it back to the planner (auto)") + kWho);
    auto f = AddFlags(sub, false);
    auto gpu = std::make_shared<unsigned>(0);
    auto mode = std::make_shared<std::string>();
    sub->add_option("GPU", *gpu, "Device index")->required();
    sub->add_option("MODE", *mode, "on, off or auto")->required()->check(CLI::IsMember({"on", "off", "auto"}));
    sub->callback([f, gpu, mode, exit_code] {
      *exit_code = Send(*f, "/v1/devices/" + std::to_string(*gpu) + "/mig", {{"mode", *mode}});
    });
  }
  for (const char* name : {"hold", "release", "requeue"}) {
    const std::string n(name);
    auto* sub = app.add_subcommand(
        name, (n == "hold"      ? std::string("Hold pending jobs: they wait until released")
               : n == "release" ? std::string("Release held jobs")
                                : std::string("Requeue running jobs: stopped, then pending again in their place")) + kWho);
    auto f = AddFlags(sub, n != "release");
    auto ids = std::make_shared<std::vector<std::uint64_t>>();
    sub->add_option("JOB", *ids, "Job ids")->required();
    sub->callback([f, ids, n, exit_code] {
      int worst = cli::kExitOk;
      for (std::uint64_t id : *ids) {
        const int rc = Send(*f, "/v1/jobs/" + std::to_string(id) + "/" + n, nlohmann::json::object());
        if (rc != cli::kExitOk) worst = rc;
      }
      *exit_code = worst;
    });
  }
}
