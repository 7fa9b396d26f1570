#include "sim/csv.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/text.h"

namespace gpuslice::sim {

void SkippedRows::Add(const Status& s) {
  ++count;
  if (first_errors.size() < kMaxKept) first_errors.push_back(s.message());
}

std::string CsvQuote(std::string_view s) {
  if (s.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

namespace {
std::vector<std::string> SplitFields(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur.push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back(Trim(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.emplace_back(Trim(cur));
  return out;
}
}  // namespace

Status CsvTable::CheckFile(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return NotFound(fmt::format("{}: cannot open trace file", path));
  if (!std::filesystem::is_regular_file(st)) {
    return InvalidArgument(fmt::format("{}: not a regular file (a trace is a CSV file)", path));
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxTraceBytes) {
    return InvalidArgument(fmt::format("{}: larger than {} GiB or unreadable", path, kMaxTraceBytes >> 30));
  }
  return Status::Ok();
}

Result<CsvTable> CsvTable::Open(const std::string& path, const std::vector<std::string>& required) {
  GPUSLICE_RETURN_IF_ERROR(CheckFile(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("{}: cannot open trace file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  CsvTable t;
  t.path_ = path;
  t.text_ = ss.str();
  // Header: the first non-blank line.
  while (t.pos_ < t.text_.size()) {
    const std::size_t end = std::min(t.text_.find('\n', t.pos_), t.text_.size());
    std::string_view line = Trim(std::string_view(t.text_).substr(t.pos_, end - t.pos_));
    t.pos_ = end + 1;
    ++t.line_no_;
    if (line.empty()) continue;
    const std::vector<std::string> names = SplitFields(line);
    for (std::size_t i = 0; i < names.size(); ++i) {
      // A repeated name made the header's field count (names) differ from its column count,
      // and Field() then indexed past the end of a record that had as many fields as columns.
      if (!t.columns_.emplace(names[i], static_cast<int>(i)).second) {
        return InvalidArgument(fmt::format("{}:{}: header names column '{}' twice", path, t.line_no_, names[i]));
      }
    }
    break;
  }
  if (t.columns_.empty()) return InvalidArgument(fmt::format("{}: empty file (no header row)", path));
  for (const std::string& r : required) {
    if (!t.Has(r)) {
      return InvalidArgument(fmt::format("{}:{}: header lacks required column '{}'", path, t.line_no_, r));
    }
  }
  return t;
}

bool CsvTable::Has(std::string_view column) const { return columns_.count(std::string(column)) > 0; }

bool CsvTable::Next() {
  while (pos_ < text_.size()) {
    const std::size_t end = std::min(text_.find('\n', pos_), text_.size());
    std::string_view line = Trim(std::string_view(text_).substr(pos_, end - pos_));
    pos_ = end + 1;
    ++line_no_;
    if (line.empty() || line.front() == '#') continue;
    fields_ = SplitFields(line);
    return true;
  }
  return false;
}

Status CsvTable::Error(std::string_view column, std::string_view value, std::string_view why) const {
  return InvalidArgument(fmt::format("{}:{}: column '{}': value '{}' {}", EscapeInvalidUtf8(path_), line_no_, column,
                                     EscapeInvalidUtf8(value), why));
}

Status CsvTable::RowError(std::string_view why) const {
  return InvalidArgument(fmt::format("{}:{}: {}", EscapeInvalidUtf8(path_), line_no_, why));
}

Result<std::string_view> CsvTable::Field(std::string_view column) const {
  auto it = columns_.find(std::string(column));
  if (it == columns_.end()) return RowError(fmt::format("no column '{}'", column));
  if (fields_.size() != columns_.size()) {
    return RowError(fmt::format("has {} fields, the header has {}", fields_.size(), columns_.size()));
  }
  return std::string_view(fields_[it->second]);
}

Result<std::int64_t> CsvTable::Int(std::string_view column, std::int64_t min, std::int64_t max) const {
  GPUSLICE_ASSIGN_OR_RETURN(std::string_view v, Field(column));
  std::int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) return Error(column, v, "is not an integer");
  if (x < min || x > max) return Error(column, v, fmt::format("is out of range [{}, {}]", min, max));
  return x;
}

Result<double> CsvTable::Double(std::string_view column) const {
  GPUSLICE_ASSIGN_OR_RETURN(std::string_view v, Field(column));
  double x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x)) {
    return Error(column, v, "is not a number");
  }
  return x;
}

}  // namespace gpuslice::sim
