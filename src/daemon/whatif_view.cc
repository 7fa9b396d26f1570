// GET /v1/whatif: the what-if over the daemon's recent history (whatif/dashboard.h), on the
// daemon's config and devices, read from the store outside the daemon's lock (on the report's
// read-only connection where serve opened one).
#include <map>

#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

Result<Json> Daemon::Impl::Whatif(const std::map<std::string, std::string>& query) const {
  sched::Config config;
  std::map<std::string, int> models;  // GPUs per model
  {
    std::shared_lock lock(mu_);
    config = sched_->config();
    for (const auto& [index, d] : device_info_) ++models[d.model != nullptr ? d.model->name : d.name];
  }
  std::vector<sim::TraceNode> nodes;
  for (const auto& [model, gpus] : models) nodes.push_back(sim::TraceNode{"host-" + model, 128000, 1024 * kGiB, gpus, model});
  return whatif_.Get(opt_.report_store ? *opt_.report_store : *store_, config, std::move(nodes), query, Now());
}

}  // namespace gpuslice::daemon
