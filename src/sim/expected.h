#pragma once
// The FGD authors' published curves (analysis_allo_discrete.csv of their artifact): mean
// allocation ratio over seeds per (workload, policy) at each arrived-demand percent.
// Values; thread-compatible.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace gpuslice::sim {

// The artifact's policy directory name for one of ours ("fgd" -> "06-FGD"); "" if none.
std::string_view PublishedPolicyName(std::string_view policy);

class PublishedResults {
 public:
  static Result<PublishedResults> Read(const std::string& path);
  // Mean over the file's seeds of the allocation ratio (%) at `percent`; nullopt if absent.
  std::optional<double> MeanAlloc(std::string_view workload, std::string_view policy, int percent) const;
  int Seeds(std::string_view workload, std::string_view policy) const;

 private:
  struct Acc {
    std::map<int, std::pair<double, int>> by_percent;  // sum, count
    int rows = 0;
  };
  std::map<std::pair<std::string, std::string>, Acc> data_;  // (workload, artifact policy)
};

}  // namespace gpuslice::sim
