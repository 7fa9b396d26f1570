#pragma once
// Private to the config parser (config.cc, config_teams.cc): a TOML table read key by key, with
// every error naming the file, the full key path and the value.

#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "core/status.h"
#include "sched/config.h"

namespace gpuslice::sched::config_internal {

// Reads one TOML table, remembering which keys were consumed so that anything left over is an
// "unknown key" error. Every error names the file, the full key path and the value.
class TableReader {
 public:
  TableReader(const toml::table& table, std::string file, std::string path)
      : table_(table), file_(std::move(file)), path_(std::move(path)) {}

  std::string Key(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }

  Status Error(std::string_view key, const toml::node& value, std::string_view detail) const {
    return InvalidArgument(
        fmt::format("{}: {} = {}: {}", file_, Key(key), Render(value), detail));
  }
  Status ErrorAt(std::string_view key, std::string_view detail) const {
    return InvalidArgument(fmt::format("{}: {}: {}", file_, Key(key), detail));
  }

  const toml::node* Get(std::string_view key) {
    seen_.insert(std::string(key));
    return table_.get(key);
  }

  Status Bool(std::string_view key, bool& out) {
    const toml::node* n = Get(key);
    if (!n) return Status::Ok();
    if (!n->is_boolean()) return Error(key, *n, "expected true or false");
    out = n->as_boolean()->get();
    return Status::Ok();
  }

  Status Int(std::string_view key, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
    const toml::node* n = Get(key);
    if (!n) return Status::Ok();
    if (!n->is_integer()) return Error(key, *n, "expected an integer");
    std::int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) return Error(key, *n, fmt::format("must be between {} and {}", lo, hi));
    out = v;
    return Status::Ok();
  }
  Status Int(std::string_view key, std::int64_t lo, std::int64_t hi, int& out) {
    std::int64_t v = out;
    GPUSLICE_RETURN_IF_ERROR(Int(key, lo, hi, v));
    out = static_cast<int>(v);
    return Status::Ok();
  }

  Status String(std::string_view key, std::string& out) {
    const toml::node* n = Get(key);
    if (!n) return Status::Ok();
    if (!n->is_string()) return Error(key, *n, "expected a string");
    out = n->as_string()->get();
    return Status::Ok();
  }

  // A unit-bearing value given as a string ("8h", "10GiB", "250m") or a plain number.
  template <typename T, typename Parser>
  Status Unit(std::string_view key, Parser parse, bool allow_zero, T& out) {
    const toml::node* n = Get(key);
    if (!n) return Status::Ok();
    std::string text;
    if (n->is_string()) {
      text = n->as_string()->get();
    } else if (n->is_integer()) {
      text = std::to_string(n->as_integer()->get());
    } else if (n->is_floating_point()) {
      text = fmt::format("{}", n->as_floating_point()->get());
    } else {
      return Error(key, *n, "expected a string with a unit");
    }
    if (allow_zero && (text == "0" || text == "none")) {
      out = 0;
      return Status::Ok();
    }
    auto r = parse(text);
    if (!r.ok()) return Error(key, *n, r.status().message());
    out = *r;
    return Status::Ok();
  }

  Status StringList(std::string_view key, std::vector<std::string>& out) {
    const toml::node* n = Get(key);
    if (!n) return Status::Ok();
    const toml::array* a = n->as_array();
    if (!a) return Error(key, *n, "expected a list of strings");
    out.clear();
    for (const toml::node& e : *a) {
      if (!e.is_string()) return Error(key, *n, "expected a list of strings");
      out.push_back(e.as_string()->get());
    }
    return Status::Ok();
  }

  const toml::table* SubTable(std::string_view key, Status& st) {
    const toml::node* n = Get(key);
    if (!n) return nullptr;
    if (!n->is_table()) {
      st = Error(key, *n, "expected a table");
      return nullptr;
    }
    return n->as_table();
  }

  Status CheckUnknown(std::string_view known_hint) const {
    for (const auto& [k, v] : table_) {
      if (!seen_.contains(std::string(k.str()))) {
        return InvalidArgument(fmt::format("{}: {} = {}: unknown key (known: {})", file_,
                                           Key(k.str()), Render(v), known_hint));
      }
    }
    return Status::Ok();
  }

  const std::string& file() const { return file_; }

  static std::string Render(const toml::node& n) {
    if (n.is_string()) return fmt::format("'{}'", n.as_string()->get());
    if (n.is_table()) return "{...}";
    std::ostringstream os;
    n.visit([&os](const auto& v) { os << v; });
    return os.str();
  }

 private:
  const toml::table& table_;
  std::string file_;
  std::string path_;
  std::set<std::string> seen_;
};

// [teams] (config_teams.cc): read into `out`; checked against the whole config by ValidateTeams.
Status ReadTeams(const toml::table& teams, const std::string& file, TeamsConfig& out);
Status ValidateTeams(const Config& config);

}  // namespace gpuslice::sched::config_internal
