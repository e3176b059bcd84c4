// vault-scheme-runner: runs a Scheme agent (docs/sandbox.md, "scheme"). It is the program of a
// posix sandbox, so every posix fence holds around the interpreter; inside, Guile 3.0 evaluates
// the agent's code in a module that holds only safe bindings (runner.scm) and the vault's host
// calls, defined here as procedures over the C++ SDK's channel (fd 3). Values cross the host
// boundary as data only: strings, bytevectors, numbers, symbols, booleans and lists of them.
//
//   vault-scheme-runner RUNNER.SCM CODE
//
// Exit: 0 when the agent's code returns (or calls (exit)); otherwise the agent is ended through
// the exit host call with the reason: "fuel exhausted", "allocation limit", "stack exhausted",
// "error: ...".
#include <libguile.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sdk/cpp/vault_agent.h"

namespace {

using vault::sdk::Agent;

Agent* g_agent = nullptr;  // the runner is single-threaded: one agent, one channel

// A bytevector's bytes, and whether a value is true. libguile's accessor macros read through a
// volatile SCM, which C++20 (clang's -Wdeprecated-volatile) frowns upon: kept to these functions.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-volatile"
#endif
char* BytevectorData(SCM bv) { return reinterpret_cast<char*>(SCM_BYTEVECTOR_CONTENTS(bv)); }
size_t BytevectorSize(SCM bv) { return SCM_BYTEVECTOR_LENGTH(bv); }
bool Truthy(SCM v) { return scm_is_true(v); }
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

// Scheme value → bytes: a string (UTF-8) or a bytevector. Anything else: nullopt.
std::optional<std::string> BytesOf(SCM value) {
  if (scm_is_string(value)) {
    size_t n = 0;
    char* s = scm_to_utf8_stringn(value, &n);
    std::string out(s, n);
    free(s);
    return out;
  }
  if (scm_is_bytevector(value)) {
    return std::string(BytevectorData(value), BytevectorSize(value));
  }
  return std::nullopt;
}

SCM Bytevector(const std::string& bytes) {
  SCM bv = scm_c_make_bytevector(bytes.size());
  if (!bytes.empty()) memcpy(BytevectorData(bv), bytes.data(), bytes.size());
  return bv;
}

SCM Str(const std::string& s) { return scm_from_utf8_stringn(s.data(), s.size()); }

// Raised to the agent's code as (host-error CALL CODE MESSAGE), a condition it may catch. Built
// from values that own nothing in C++, because scm_throw does not return (no destructor runs
// after it): callers build the message inside a scope that has ended.
[[noreturn]] void Throw(const char* call, int code, SCM message) {
  scm_throw(scm_from_utf8_symbol("host-error"),
            scm_list_3(scm_from_utf8_symbol(call), scm_from_int(code), message));
  abort();  // not reached
}

// The outcome of one host call before it is turned into a Scheme value or an exception.
struct Outcome {
  SCM value = SCM_UNSPECIFIED;
  int code = 0;
  SCM message = SCM_BOOL_F;
};

template <typename T>
bool Failed(const absl::StatusOr<T>& r, Outcome* out) {
  if (r.ok()) return false;
  out->code = static_cast<int>(r.status().code());
  out->message = Str(std::string(r.status().message()));
  return true;
}
bool Failed(const absl::Status& s, Outcome* out) {
  if (s.ok()) return false;
  out->code = static_cast<int>(s.code());
  out->message = Str(std::string(s.message()));
  return true;
}

SCM Finish(const char* call, const Outcome& o) {
  if (o.code != 0) Throw(call, o.code, o.message);
  return o.value;
}

[[noreturn]] void WrongType(const char* call, const char* what) {
  Throw(call, static_cast<int>(absl::StatusCode::kInvalidArgument), scm_from_utf8_string(what));
}

// (%log message)
SCM Log(SCM message) {
  Outcome o;
  {
    std::optional<std::string> text = BytesOf(message);
    if (!text) WrongType("log", "log takes a string");
    Failed(g_agent->Log(vault::v1::LogRequest::INFO, *text), &o);
  }
  return Finish("log", o);
}

// (%exit code message result): `result` #f, or a string or bytevector, stored in the CAS and
// named as the agent's result.
SCM Exit(SCM code, SCM message, SCM result) {
  Outcome o;
  {
    std::optional<std::string> text = BytesOf(message);
    std::optional<std::string> bytes = BytesOf(result);
    if (!scm_is_signed_integer(code, 0, 255) || !text || (!bytes && Truthy(result))) {
      WrongType("exit", "exit takes a code 0-255, a string and a result (string or bytevector)");
    }
    std::optional<vault::v1::Digest> digest;
    if (bytes.has_value()) {
      absl::StatusOr<vault::v1::Digest> d = g_agent->CasPut(*bytes);
      if (!Failed(d, &o)) digest = *d;
    }
    if (o.code == 0) Failed(g_agent->Exit(scm_to_int(code), *text, digest), &o);
  }
  return Finish("exit", o);
}

// (get-state) → bytevector, or #f before the first checkpoint when there is no initial state
SCM GetState() {
  Outcome o;
  {
    absl::StatusOr<std::optional<std::string>> state = g_agent->GetState();
    if (!Failed(state, &o)) o.value = state->has_value() ? Bytevector(**state) : SCM_BOOL_F;
  }
  return Finish("get-state", o);
}

// (checkpoint data) → "sha256:<hex>/<size>"
SCM Checkpoint(SCM data) {
  Outcome o;
  {
    std::optional<std::string> bytes = BytesOf(data);
    if (!bytes) WrongType("checkpoint", "checkpoint takes a string or a bytevector");
    absl::StatusOr<vault::v1::Digest> d = g_agent->Checkpoint(*bytes);
    if (!Failed(d, &o)) o.value = Str(vault::sdk::DigestToText(*d));
  }
  return Finish("checkpoint", o);
}

// (cas-put data) → "sha256:<hex>/<size>"
SCM CasPut(SCM data) {
  Outcome o;
  {
    std::optional<std::string> bytes = BytesOf(data);
    if (!bytes) WrongType("cas-put", "cas-put takes a string or a bytevector");
    absl::StatusOr<vault::v1::Digest> d = g_agent->CasPut(*bytes);
    if (!Failed(d, &o)) o.value = Str(vault::sdk::DigestToText(*d));
  }
  return Finish("cas-put", o);
}

// (cas-get "sha256:<hex>/<size>") → bytevector
SCM CasGet(SCM digest) {
  Outcome o;
  {
    std::optional<std::string> text = BytesOf(digest);
    if (!scm_is_string(digest) || !text) WrongType("cas-get", "cas-get takes a digest string");
    absl::StatusOr<vault::v1::Digest> d = vault::sdk::ParseDigest(*text);
    if (!Failed(d, &o)) {
      absl::StatusOr<std::string> bytes = g_agent->CasGet(*d);
      if (!Failed(bytes, &o)) o.value = Bytevector(*bytes);
    }
  }
  return Finish("cas-get", o);
}

// (read-file path) → bytevector
SCM ReadFile(SCM path) {
  Outcome o;
  {
    std::optional<std::string> p = BytesOf(path);
    if (!scm_is_string(path) || !p) WrongType("read-file", "read-file takes a path string");
    absl::StatusOr<std::string> bytes = g_agent->ReadFile(*p);
    if (!Failed(bytes, &o)) o.value = Bytevector(*bytes);
  }
  return Finish("read-file", o);
}

// (write-file path data) → the file's size
SCM WriteFile(SCM path, SCM data) {
  Outcome o;
  {
    std::optional<std::string> p = BytesOf(path);
    std::optional<std::string> bytes = BytesOf(data);
    if (!scm_is_string(path) || !p || !bytes) {
      WrongType("write-file", "write-file takes a path string and a string or bytevector");
    }
    absl::StatusOr<uint64_t> size = g_agent->WriteFile(*p, *bytes);
    if (!Failed(size, &o)) o.value = scm_from_uint64(*size);
  }
  return Finish("write-file", o);
}

// (list-directory path) → list of names
SCM ListDirectory(SCM path) {
  Outcome o;
  {
    std::optional<std::string> p = BytesOf(path);
    if (!scm_is_string(path) || !p) WrongType("list-directory", "list-directory takes a path");
    auto entries = g_agent->List(*p);
    if (!Failed(entries, &o)) {
      SCM names = SCM_EOL;
      for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
        names = scm_cons(Str(it->name()), names);
      }
      o.value = names;
    }
  }
  return Finish("list-directory", o);
}

// (%send to type data) → message id
SCM Send(SCM to, SCM type, SCM data) {
  Outcome o;
  {
    std::optional<std::string> t = BytesOf(to), ty = BytesOf(type), d = BytesOf(data);
    if (!scm_is_string(to) || !scm_is_string(type) || !t || !ty || !d) {
      WrongType("agent-send", "agent-send takes an agent (string), a type (string) and data");
    }
    absl::StatusOr<uint64_t> id = g_agent->Send(*t, *ty, *d);
    if (!Failed(id, &o)) o.value = scm_from_uint64(*id);
  }
  return Finish("agent-send", o);
}

// (%receive timeout-ms) → ((id . N) (from . S) (type . S) (data . BV)) or #f
SCM Receive(SCM timeout_ms) {
  Outcome o;
  {
    if (!scm_is_unsigned_integer(timeout_ms, 0, 86400000)) {
      WrongType("agent-receive", "agent-receive's timeout is 0-86400000 ms");
    }
    auto m = g_agent->Receive(absl::Milliseconds(scm_to_uint64(timeout_ms)));
    if (!Failed(m, &o)) {
      if (!m->has_value()) {
        o.value = SCM_BOOL_F;
      } else {
        const vault::v1::Message& msg = **m;
        o.value = scm_list_4(scm_cons(scm_from_utf8_symbol("id"), scm_from_uint64(msg.id())),
                             scm_cons(scm_from_utf8_symbol("from"), Str(msg.from())),
                             scm_cons(scm_from_utf8_symbol("type"), Str(msg.type())),
                             scm_cons(scm_from_utf8_symbol("data"), Bytevector(msg.data())));
      }
    }
  }
  return Finish("agent-receive", o);
}

// (http-get url) → ((status . N) (content-type . S) (body . BV) (url . S))
SCM HttpGet(SCM url) {
  Outcome o;
  {
    std::optional<std::string> u = BytesOf(url);
    if (!scm_is_string(url) || !u) WrongType("http-get", "http-get takes a URL string");
    absl::StatusOr<vault::v1::HttpGetResult> r = g_agent->HttpGet(*u);
    if (!Failed(r, &o)) {
      o.value = scm_list_4(scm_cons(scm_from_utf8_symbol("status"), scm_from_uint32(r->status())),
                           scm_cons(scm_from_utf8_symbol("content-type"), Str(r->content_type())),
                           scm_cons(scm_from_utf8_symbol("body"), Bytevector(r->body())),
                           scm_cons(scm_from_utf8_symbol("url"), Str(r->final_url())));
    }
  }
  return Finish("http-get", o);
}

// (self-inspect) → an alist of what the vault says of the agent
SCM SelfInspect() {
  Outcome o;
  {
    absl::StatusOr<vault::v1::SelfInspectResult> r = g_agent->SelfInspect();
    if (!Failed(r, &o)) {
      auto pair = [](const char* k, SCM v) { return scm_cons(scm_from_utf8_symbol(k), v); };
      o.value =
          scm_list_n(pair("id", Str(r->agent_id())), pair("vault", Str(r->vault())),
                     pair("principal", Str(r->principal())), pair("hop", scm_from_uint32(r->hop())),
                     pair("home-vault", Str(r->home_vault())), pair("purpose", Str(r->purpose())),
                     SCM_UNDEFINED);
    }
  }
  return Finish("self-inspect", o);
}

// (%sleep seconds): no host call (the vault sees only a quiet agent), bounded by the sandbox's
// wall-time limit.
SCM Sleep(SCM seconds) {
  if (!scm_is_real(seconds) || scm_to_double(seconds) < 0 || scm_to_double(seconds) > 86400) {
    WrongType("sleep", "sleep takes 0-86400 seconds");
  }
  const double s = scm_to_double(seconds);
  timespec ts{static_cast<time_t>(s), static_cast<long>((s - static_cast<time_t>(s)) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  return SCM_UNSPECIFIED;
}

// (%share digest agents) → #t: lets each agent (ids or names) cas-get the object.
SCM Share(SCM digest, SCM agents) {
  Outcome o;
  {
    std::optional<std::string> text = BytesOf(digest);
    std::vector<std::string> to;
    bool ok = scm_is_string(digest) && text.has_value() && Truthy(scm_list_p(agents));
    for (SCM l = agents; ok && scm_is_pair(l); l = scm_cdr(l)) {
      std::optional<std::string> a = BytesOf(scm_car(l));
      ok = a.has_value() && scm_is_string(scm_car(l));
      if (ok) to.push_back(*a);
    }
    if (!ok) WrongType("share", "share takes a digest string and a list of agent ids or names");
    absl::StatusOr<vault::v1::Digest> d = vault::sdk::ParseDigest(*text);
    if (!Failed(d, &o) && !Failed(g_agent->Share(*d, to), &o)) o.value = SCM_BOOL_T;
  }
  return Finish("share", o);
}

// (%spawn-child spec-text state) → the child's id. `state` #f, a string or a bytevector.
SCM SpawnChild(SCM spec, SCM state) {
  Outcome o;
  {
    std::optional<std::string> text = BytesOf(spec);
    std::optional<std::string> bytes = BytesOf(state);
    if (!scm_is_string(spec) || !text || (!bytes && Truthy(state))) {
      WrongType("spawn-child",
                "spawn-child takes a spec and an initial state (string or bytevector)");
    }
    auto r = g_agent->SpawnChildFromText(*text, bytes);
    if (!Failed(r, &o)) o.value = Str(r->agent_id());
  }
  return Finish("spawn-child", o);
}

// (%migrate vault): returns only at the destination, where the agent's replay reaches this
// call (docs/replay.md), or with a host-error when the hop did not happen.
SCM Migrate(SCM vault) {
  Outcome o;
  {
    std::optional<std::string> v = BytesOf(vault);
    if (!scm_is_string(vault) || !v) WrongType("migrate-to", "migrate-to takes a vault name");
    Failed(g_agent->Migrate(*v, ""), &o);
  }
  return Finish("migrate-to", o);
}

// (%budget "VAULT_MAX_STEPS" | "VAULT_MAX_ALLOCATION") → the fuel budget the vault set from the
// agent's constraints, or #f. Not a host call: a replay must not answer it from another vault's
// log (the budget is this vault's).
SCM Budget(SCM name) {
  std::optional<std::string> n = BytesOf(name);
  const char* v = n.has_value() ? getenv(n->c_str()) : nullptr;
  if (v == nullptr || *v == '\0') return SCM_BOOL_F;
  char* end = nullptr;
  unsigned long long value = strtoull(v, &end, 10);
  return end != nullptr && *end == '\0' ? scm_from_uint64(value) : SCM_BOOL_F;
}

void DefineHostModule(void*) {
  struct Def {
    const char* name;
    int req;
    scm_t_subr fn;
  } defs[] = {
      {"%log", 1, reinterpret_cast<scm_t_subr>(&Log)},
      {"%exit", 3, reinterpret_cast<scm_t_subr>(&Exit)},
      {"get-state", 0, reinterpret_cast<scm_t_subr>(&GetState)},
      {"checkpoint", 1, reinterpret_cast<scm_t_subr>(&Checkpoint)},
      {"cas-put", 1, reinterpret_cast<scm_t_subr>(&CasPut)},
      {"cas-get", 1, reinterpret_cast<scm_t_subr>(&CasGet)},
      {"read-file", 1, reinterpret_cast<scm_t_subr>(&ReadFile)},
      {"write-file", 2, reinterpret_cast<scm_t_subr>(&WriteFile)},
      {"list-directory", 1, reinterpret_cast<scm_t_subr>(&ListDirectory)},
      {"%send", 3, reinterpret_cast<scm_t_subr>(&Send)},
      {"%receive", 1, reinterpret_cast<scm_t_subr>(&Receive)},
      {"http-get", 1, reinterpret_cast<scm_t_subr>(&HttpGet)},
      {"self-inspect", 0, reinterpret_cast<scm_t_subr>(&SelfInspect)},
      {"%sleep", 1, reinterpret_cast<scm_t_subr>(&Sleep)},
      {"%migrate", 1, reinterpret_cast<scm_t_subr>(&Migrate)},
      {"%share", 2, reinterpret_cast<scm_t_subr>(&Share)},
      {"%spawn-child", 2, reinterpret_cast<scm_t_subr>(&SpawnChild)},
      {"%budget", 1, reinterpret_cast<scm_t_subr>(&Budget)},
  };
  for (const Def& d : defs) {
    scm_c_define_gsubr(d.name, d.req, 0, 0, d.fn);
    scm_c_export(d.name, nullptr);
  }
}

struct Args {
  const char* runner_scm;
  const char* code;
  int exit_code = 1;
};

void* Main(void* data) {
  Args* args = static_cast<Args*>(data);
  scm_c_define_module("vault host", &DefineHostModule, nullptr);
  scm_c_primitive_load(args->runner_scm);  // defines (vault runner)
  SCM run = scm_c_public_ref("vault runner", "run-agent");
  SCM result = scm_call_1(run, scm_from_utf8_string(args->code));
  args->exit_code = scm_is_signed_integer(result, 0, 255) ? scm_to_int(result) : 1;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: vault-scheme-runner RUNNER.SCM CODE\n");
    return 2;
  }
  // The collector's threads and their /proc/stat probe: one marker is enough for an agent.
  setenv("GC_NPROCS", "1", 1);
  setenv("GC_MARKERS", "1", 1);
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Connect();
  if (!agent.ok()) {
    fprintf(stderr, "vault-scheme-runner: %s\n", agent.status().ToString().c_str());
    return 1;
  }
  g_agent = agent->get();
  Args args{argv[1], argv[2]};
  scm_with_guile(&Main, &args);
  return args.exit_code;
}
