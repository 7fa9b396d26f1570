#pragma once
// A small CSV table reader for trace files: a header row naming the columns, then one record per
// line; fields separated by commas, optionally double-quoted ("" inside quotes is a quote).
// Errors name file:line, the column and the value. Values; thread-compatible.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::sim {

// No trace time (a submit, a creation or deletion time, a duration, or submit + duration) may
// exceed 10 years: a replay's work grows with simulated time (a busy slice in an idle-policed
// queue is sampled once per idle window), and larger values overflowed the microsecond
// arithmetic into negative GPU-hours. Real traces span weeks to months.
inline constexpr Micros kMaxTraceTime = 10LL * 365 * 24 * kHour;

// What a reader does with a bad row: stop with its error, or count it and go on.
struct ReadOptions {
  bool skip_bad_rows = false;
};

// Rows a reader skipped (only with skip_bad_rows); the first few errors are kept for the report.
struct SkippedRows {
  std::int64_t count = 0;
  std::vector<std::string> first_errors;  // at most kMaxKept
  static constexpr std::size_t kMaxKept = 5;
  void Add(const Status& s);
};

class CsvTable {
 public:
  // Reads the whole file. Fails on a missing file, an empty file or a header without
  // `required` columns.
  static Result<CsvTable> Open(const std::string& path, const std::vector<std::string>& required);
  // A trace must be a regular file of at most kMaxTraceBytes: a device (/dev/zero), a FIFO or a
  // directory is an error naming the path, never an endless read.
  static constexpr std::uintmax_t kMaxTraceBytes = std::uintmax_t{4} << 30;
  static Status CheckFile(const std::string& path);

  // Iterates records; returns false at the end. Blank lines and lines starting with '#' are
  // skipped. A record whose field count differs from the header's is reported by Field().
  bool Next();
  int line() const { return line_no_; }
  const std::string& path() const { return path_; }
  bool Has(std::string_view column) const;

  // The named field of the current record (trimmed); an error if the record is short.
  Result<std::string_view> Field(std::string_view column) const;
  // Typed accessors; errors read "FILE:LINE: column 'c': value 'v' is not ...".
  Result<std::int64_t> Int(std::string_view column, std::int64_t min, std::int64_t max) const;
  Result<double> Double(std::string_view column) const;
  Status Error(std::string_view column, std::string_view value, std::string_view why) const;
  Status RowError(std::string_view why) const;

 private:
  std::string path_;
  std::string text_;
  std::size_t pos_ = 0;
  int line_no_ = 0;
  std::unordered_map<std::string, int> columns_;
  std::vector<std::string> fields_;
};

// Trims ASCII spaces and a trailing '\r'.
std::string_view Trim(std::string_view s);

// A field as CsvTable reads it back: quoted (quotes doubled) when it holds a comma, a quote or
// a line break.
std::string CsvQuote(std::string_view s);

}  // namespace gpuslice::sim
