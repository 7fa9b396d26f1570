#include "sim/expected.h"

#include <string>

#include <fmt/format.h>

#include "sim/csv.h"

namespace gpuslice::sim {

std::string_view PublishedPolicyName(std::string_view policy) {
  static const std::pair<std::string_view, std::string_view> kNames[] = {
      {"random", "01-Random"},         {"dot-product", "02-DotProd"}, {"gpu-clustering", "03-GpuClustering"},
      {"gpu-packing", "04-GpuPacking"}, {"best-fit-fgd", "05-BestFit"}, {"fgd", "06-FGD"}};
  for (const auto& [ours, theirs] : kNames) {
    if (ours == policy) return theirs;
  }
  return "";
}

Result<PublishedResults> PublishedResults::Read(const std::string& path) {
  GPUSLICE_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Open(path, {"workload", "sc_policy", "100", "130"}));
  PublishedResults r;
  while (t.Next()) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view w, t.Field("workload"));
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view p, t.Field("sc_policy"));
    Acc& acc = r.data_[{std::string(w), std::string(p)}];
    ++acc.rows;
    for (int x = 0; x <= 130; ++x) {
      const std::string col = std::to_string(x);
      if (!t.Has(col)) continue;
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view v, t.Field(col));
      if (v.empty()) continue;
      GPUSLICE_ASSIGN_OR_RETURN(double d, t.Double(col));
      auto& [sum, n] = acc.by_percent[x];
      sum += d;
      ++n;
    }
  }
  return r;
}

std::optional<double> PublishedResults::MeanAlloc(std::string_view workload, std::string_view policy,
                                                  int percent) const {
  auto it = data_.find({std::string(workload), std::string(PublishedPolicyName(policy))});
  if (it == data_.end()) return std::nullopt;
  auto p = it->second.by_percent.find(percent);
  if (p == it->second.by_percent.end() || p->second.second == 0) return std::nullopt;
  return p->second.first / p->second.second;
}

int PublishedResults::Seeds(std::string_view workload, std::string_view policy) const {
  auto it = data_.find({std::string(workload), std::string(PublishedPolicyName(policy))});
  return it == data_.end() ? 0 : it->second.rows;
}

}  // namespace gpuslice::sim
