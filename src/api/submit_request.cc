#include "api/submit_request.h"

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>

#include "api/bounded_json.h"
#include "core/text.h"
#include "store/codec.h"

namespace gpuslice::api {
namespace {

using nlohmann::json;

// One field as text: strings as given, numbers formatted. An array, an object or a string
// longer than kMaxTextField is refused here, naming the field and never echoing the value
// (errors downstream quote it).
Result<std::optional<std::string>> TextField(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) {
    const std::string& v = it->get_ref<const std::string&>();
    if (v.size() > kMaxTextField) {
      return InvalidArgument(fmt::format("field '{}': {} bytes, at most {} are accepted", name, v.size(),
                                         kMaxTextField));
    }
    return std::optional<std::string>(v);
  }
  if (it->is_number_integer()) return std::optional<std::string>(it->dump());
  if (it->is_number()) return std::optional<std::string>(fmt::format("{}", it->get<double>()));
  return InvalidArgument(fmt::format("field '{}': {} is not a text value", name, ShownJson(*it)));
}

// A text field that may appear under either of two names (the API's aliases).
Result<std::optional<std::string>> TextField(const json& body, const char* name, const char* alias) {
  GPUSLICE_ASSIGN_OR_RETURN(auto v, TextField(body, name));
  if (v) return v;
  return TextField(body, alias);
}

bool KeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == ':';
}

Status ReadIdempotencyKey(const json& body, SubmitRequest& r) {
  auto k = body.find("idempotency_key");
  if (k == body.end() || k->is_null()) return Status::Ok();
  const bool ok = k->is_string() && !k->get_ref<const std::string&>().empty() &&
                  k->get_ref<const std::string&>().size() <= kMaxIdempotencyKey &&
                  std::all_of(k->get_ref<const std::string&>().begin(), k->get_ref<const std::string&>().end(), KeyChar);
  if (!ok) {
    return InvalidArgument(fmt::format("field 'idempotency_key': value '{}' must be 1 to {} characters of "
                                       "[A-Za-z0-9._:-]", ShownJson(*k), kMaxIdempotencyKey));
  }
  r.idempotency_key = k->get<std::string>();
  return Status::Ok();
}

Status ReadUmask(const json& body, SubmitRequest& r) {
  auto m = body.find("umask");
  if (m == body.end() || m->is_null()) return Status::Ok();
  // Octal text, as the shell's umask prints it: "0022", "027", "77".
  const bool ok = m->is_string() && !m->get_ref<const std::string&>().empty() &&
                  m->get_ref<const std::string&>().size() <= 4 &&
                  std::all_of(m->get_ref<const std::string&>().begin(), m->get_ref<const std::string&>().end(),
                              [](char c) { return c >= '0' && c <= '7'; });
  const int mask = ok ? std::stoi(m->get<std::string>(), nullptr, 8) : -1;
  if (!ok || mask > 0777) {
    return InvalidArgument(fmt::format("field 'umask': value '{}' must be octal text 0000..0777, as the "
                                       "shell's umask prints it", ShownJson(*m)));
  }
  r.umask = mask;
  return Status::Ok();
}

Status ReadGpus(const json& body, SubmitRequest& r) {
  auto g = body.find("gpus");
  if (g == body.end() || g->is_null()) return Status::Ok();
  if (!g->is_number_integer() || g->get<std::int64_t>() < 1 || g->get<std::int64_t>() > 1024)
    return InvalidArgument(fmt::format("field 'gpus': value '{}' must be an integer 1..1024", ShownJson(*g)));
  r.gpus = g->get<int>();
  return Status::Ok();
}

// argv, cwd and env: sizes are capped below what execve(2) accepts, so an oversized request is
// refused at submit, naming the field, instead of failing at start or filling the store.
Status ReadCommand(const json& body, SubmitRequest& r) {
  std::size_t total = 0;  // bytes execve copies: every string with its NUL
  const auto argv = body.find("argv");
  if (argv == body.end() || !argv->is_array() || argv->empty()) {
    return InvalidArgument("field 'argv': a non-empty list of strings is required (the command)");
  }
  if (argv->size() > kMaxArgvCount) {
    return InvalidArgument(fmt::format("field 'argv': {} elements, at most {} are allowed",
                                       argv->size(), kMaxArgvCount));
  }
  for (std::size_t i = 0; i < argv->size(); ++i) {
    auto a = store::BytesFromJson((*argv)[i], fmt::format("field 'argv': element {}", i));
    if (!a.ok()) return a.status();
    if (a->find('\0') != std::string::npos) {
      return InvalidArgument(fmt::format("field 'argv': element {} ('{}') holds a NUL byte", i, ShownText(*a)));
    }
    if (a->size() > kMaxArgBytes) {
      return InvalidArgument(fmt::format("field 'argv': element {} is {} bytes, at most {} are allowed", i,
                                         a->size(), kMaxArgBytes));
    }
    total += a->size() + 1;
    r.argv.push_back(*std::move(a));
  }
  if (r.argv[0].empty()) return InvalidArgument("field 'argv': the program name is empty");
  if (const auto c = body.find("cwd"); c != body.end() && !c->is_null()) {
    auto cwd = store::BytesFromJson(*c, "field 'cwd'");
    if (!cwd.ok()) return cwd.status();
    if (cwd->empty() || (*cwd)[0] != '/' || cwd->find('\0') != std::string::npos || cwd->size() > kMaxPathBytes) {
      return InvalidArgument(fmt::format("field 'cwd': value '{}' must be an absolute path without NUL "
                                         "bytes, at most {} bytes", ShownText(*cwd), kMaxPathBytes));
    }
    r.cwd = *std::move(cwd);
  }
  if (const auto e = body.find("env"); e != body.end() && !e->is_null()) {
    // An object {NAME: value} when every name is UTF-8; else a list of [name, value].
    if (!e->is_object() && !e->is_array()) {
      return InvalidArgument("field 'env': expected an object of strings or a list of [name, value]");
    }
    if (e->size() > kMaxEnvCount) {
      return InvalidArgument(fmt::format("field 'env': {} entries, at most {} are allowed", e->size(), kMaxEnvCount));
    }
    std::vector<std::pair<std::string, std::string>> env;
    if (e->is_object()) {
      for (const auto& [k, v] : e->items()) {
        auto value = store::BytesFromJson(v, fmt::format("field 'env': entry '{}'", ShownText(k)));
        if (!value.ok()) return value.status();
        env.emplace_back(k, *std::move(value));
      }
    } else {
      for (std::size_t i = 0; i < e->size(); ++i) {
        const json& kv = (*e)[i];
        if (!kv.is_array() || kv.size() != 2) {
          return InvalidArgument(fmt::format("field 'env': element {} is not [name, value]", i));
        }
        auto k = store::BytesFromJson(kv[0], fmt::format("field 'env': element {} name", i));
        if (!k.ok()) return k.status();
        auto v = store::BytesFromJson(kv[1], fmt::format("field 'env': element {} value", i));
        if (!v.ok()) return v.status();
        env.emplace_back(*std::move(k), *std::move(v));
      }
    }
    for (auto& [k, v] : env) {
      if (k.empty() || k.find_first_of(std::string_view("=\0", 2)) != std::string::npos ||
          v.find('\0') != std::string::npos) {
        return InvalidArgument(fmt::format("field 'env': entry '{}' is not NAME: \"value\" (a name without "
                                           "'=' and NUL, a value without NUL)", ShownText(k)));
      }
      if (k.size() + 1 + v.size() > kMaxArgBytes) {
        return InvalidArgument(fmt::format("field 'env': entry '{}' is {} bytes, at most {} are allowed",
                                           ShownText(k), k.size() + 1 + v.size(), kMaxArgBytes));
      }
      total += k.size() + v.size() + 2;
      r.env.emplace_back(std::move(k), std::move(v));
    }
  }
  if (total > kMaxCommandBytes) {
    return InvalidArgument(fmt::format("fields 'argv' and 'env': {} bytes together, at most {} are allowed",
                                       total, kMaxCommandBytes));
  }
  return Status::Ok();
}

}  // namespace

Result<SubmitRequest> SubmitRequest::FromJson(const json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  static constexpr std::array<std::string_view, 16> kKnown = {
      "queue", "kind", "gpus", "fraction", "gpu", "mem", "memory", "time", "time_limit", "model",
      "argv", "cwd", "env", "idempotency_key", "umask", "team"};
  for (const auto& [k, v] : body.items()) {
    if (std::find(kKnown.begin(), kKnown.end(), k) == kKnown.end()) {
      return InvalidArgument(fmt::format("field '{}': unknown (expected one of queue, kind, "
                                         "gpus, fraction, mem, time, model, argv, cwd, env, "
                                         "idempotency_key, umask, team)", ShownText(k)));
    }
  }
  SubmitRequest r;
  GPUSLICE_RETURN_IF_ERROR(ReadIdempotencyKey(body, r));
  GPUSLICE_RETURN_IF_ERROR(ReadUmask(body, r));
  GPUSLICE_ASSIGN_OR_RETURN(r.queue, TextField(body, "queue"));
  GPUSLICE_ASSIGN_OR_RETURN(r.kind, TextField(body, "kind"));
  GPUSLICE_RETURN_IF_ERROR(ReadGpus(body, r));
  GPUSLICE_ASSIGN_OR_RETURN(r.fraction, TextField(body, "fraction", "gpu"));
  GPUSLICE_ASSIGN_OR_RETURN(r.mem, TextField(body, "mem", "memory"));
  GPUSLICE_ASSIGN_OR_RETURN(r.time, TextField(body, "time", "time_limit"));
  GPUSLICE_ASSIGN_OR_RETURN(r.model, TextField(body, "model"));
  GPUSLICE_ASSIGN_OR_RETURN(r.team, TextField(body, "team"));
  GPUSLICE_RETURN_IF_ERROR(ReadCommand(body, r));
  return r;
}

json SubmitRequest::ToJson() const {
  json argv_json = json::array();
  for (const std::string& a : argv) argv_json.push_back(store::BytesToJson(a));
  json body = {{"argv", argv_json}};
  auto text = [&](const char* name, const std::optional<std::string>& v) {
    if (v) body[name] = *v;
  };
  text("queue", queue);
  if (gpus) body["gpus"] = *gpus;
  text("fraction", fraction);
  text("mem", mem);
  text("time", time);
  text("kind", kind);
  text("model", model);
  text("team", team);
  if (cwd) body["cwd"] = store::BytesToJson(*cwd);
  // An object {NAME: value} when every name is UTF-8 (JSON keys must be); else [[name, value]].
  const bool names_utf8 = std::all_of(env.begin(), env.end(), [](const auto& kv) { return IsValidUtf8(kv.first); });
  json env_json = names_utf8 ? json::object() : json::array();
  for (const auto& [k, v] : env) {
    if (names_utf8) {
      env_json[k] = store::BytesToJson(v);
    } else {
      env_json.push_back(json::array({store::BytesToJson(k), store::BytesToJson(v)}));
    }
  }
  body["env"] = env_json;
  if (umask) body["umask"] = fmt::format("{:04o}", static_cast<unsigned>(*umask));
  if (idempotency_key) body["idempotency_key"] = *idempotency_key;
  return body;
}

}  // namespace gpuslice::api
