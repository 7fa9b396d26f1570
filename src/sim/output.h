#pragma once
// Report helpers for the simulator: a terminal progress bar, and self-contained SVG line plots
// that open in any browser. Not thread-safe.

#include <chrono>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gpuslice::sim {

// A one-line progress bar on a terminal stream; silent until the work has run for a second,
// and entirely silent when disabled (not a terminal).
class Progress {
 public:
  Progress(std::ostream& err, bool enabled, std::string label);
  ~Progress();
  void Update(double fraction);  // 0..1
  void Done();

 private:
  std::ostream& err_;
  bool enabled_;
  bool shown_ = false;
  std::string label_;
  std::chrono::steady_clock::time_point start_;
  int last_percent_ = -1;
};

// True iff stderr is a terminal.
bool StderrIsTerminal();

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct PlotSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
};

std::string SvgLinePlot(const PlotSpec& spec, const std::vector<Series>& series);

// Horizontal bars, one row per category, each with one value per segment: stacked end to end
// (stacked) or side by side within the row. Negative values are drawn as 0; the x axis is
// y_label's quantity (x_label unused).
struct BarRow {
  std::string label;
  std::vector<double> values;  // one per segment name
};
std::string SvgBarPlot(const PlotSpec& spec, const std::vector<std::string>& segments, const std::vector<BarRow>& rows,
                       bool stacked);

// Writes `text` to `path` (creating parent directories). Errors name the path.
Status WriteFile(const std::string& path, const std::string& text);

}  // namespace gpuslice::sim
