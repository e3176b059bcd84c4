#include "sandbox/wasm/engine.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "sandbox/wasm/internal/engine_state.h"
#include "wabt/binary-reader.h"
#include "wabt/error-formatter.h"
#include "wabt/feature.h"
#include "wabt/interp/binary-reader-interp.h"
#include "wabt/interp/interp.h"

namespace vault::sandbox::wasm {
namespace {

namespace wi = wabt::interp;

constexpr absl::string_view kExitPayload = "vault.wasm/exit";

absl::StatusOr<ValType> ToValType(wabt::Type t) {
  switch (t) {
    case wabt::Type::I32:
      return ValType::kI32;
    case wabt::Type::I64:
      return ValType::kI64;
    case wabt::Type::F32:
      return ValType::kF32;
    case wabt::Type::F64:
      return ValType::kF64;
    default:
      return absl::InvalidArgumentError(absl::StrCat("type ", t.GetName()));
  }
}

const char* ValTypeName(ValType t) {
  switch (t) {
    case ValType::kI32:
      return "i32";
    case ValType::kI64:
      return "i64";
    case ValType::kF32:
      return "f32";
    case ValType::kF64:
      return "f64";
  }
  return "?";
}

std::string Signature(const std::vector<ValType>& params, const std::vector<ValType>& results) {
  std::string out = "(";
  for (size_t i = 0; i < params.size(); ++i)
    absl::StrAppend(&out, i ? ", " : "", ValTypeName(params[i]));
  absl::StrAppend(&out, ") -> (");
  for (size_t i = 0; i < results.size(); ++i)
    absl::StrAppend(&out, i ? ", " : "", ValTypeName(results[i]));
  return absl::StrCat(out, ")");
}

uint64_t Bits(const wi::Value& v, ValType t) {
  switch (t) {
    case ValType::kI32:
      return v.Get<uint32_t>();
    case ValType::kI64:
      return v.Get<uint64_t>();
    case ValType::kF32: {
      float f = v.Get<float>();
      uint32_t b;
      memcpy(&b, &f, 4);
      return b;
    }
    case ValType::kF64: {
      double d = v.Get<double>();
      uint64_t b;
      memcpy(&b, &d, 8);
      return b;
    }
  }
  return 0;
}

wi::Value FromBits(uint64_t bits, ValType t) {
  switch (t) {
    case ValType::kI32:
      return wi::Value::Make(static_cast<uint32_t>(bits));
    case ValType::kI64:
      return wi::Value::Make(bits);
    case ValType::kF32: {
      const uint32_t b = static_cast<uint32_t>(bits);
      float f;
      memcpy(&f, &b, 4);
      return wi::Value::Make(f);
    }
    case ValType::kF64: {
      double d;
      memcpy(&d, &bits, 8);
      return wi::Value::Make(d);
    }
  }
  return wi::Value::Make(0u);
}

// "call stack exhausted" and the like, as the agent's end says it.
std::string DescribeTrap(const std::string& message) {
  if (message == "call stack exhausted") return "stack exhausted";
  return absl::StrCat("trap: ", message);
}

}  // namespace

Engine::Engine() : state_(std::make_unique<State>()) {}
Engine::~Engine() = default;

absl::Status Engine::Exit(int code) {
  absl::Status s = absl::CancelledError(absl::StrCat("exit ", code));
  s.SetPayload(kExitPayload, absl::Cord(absl::StrCat(code)));
  return s;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Load(absl::string_view module_bytes,
                                                     const EngineLimits& limits,
                                                     const ImportResolver& resolver) {
  if (module_bytes.size() > limits.max_module_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the module is ", module_bytes.size(),
                                                   " bytes; this vault loads at most ",
                                                   limits.max_module_bytes));
  }
  if (limits.slice == 0 || limits.max_call_depth == 0) {
    return absl::InvalidArgumentError("the slice and the call depth must be positive");
  }
  std::unique_ptr<Engine> engine(new Engine());
  State& s = *engine->state_;
  s.limits = limits;
  engine->module_sha256_ = common::Sha256::Hash(module_bytes);

  wi::ModuleDesc desc;
  wabt::Errors errors;
  wabt::ReadBinaryOptions options(s.features, /*log_stream=*/nullptr, /*read_debug_names=*/false,
                                  /*stop_on_first_error=*/true,
                                  /*fail_on_custom_section_error=*/false);
  if (wabt::Failed(wi::ReadBinaryInterp("module.wasm", module_bytes.data(), module_bytes.size(),
                                        options, &errors, &desc))) {
    std::string why = errors.empty()
                          ? std::string("it does not parse")
                          : wabt::FormatErrorsToString(errors, wabt::Location::Type::Binary);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return absl::InvalidArgumentError(absl::StrCat("not a valid WebAssembly module: ", why));
  }
  // Imports: functions the host offers, with the same type; nothing else.
  wi::RefVec imports;
  for (const wi::ImportDesc& import : desc.imports) {
    const std::string what = absl::StrCat(import.type.module, ".", import.type.name);
    if (import.type.type->kind != wabt::ExternalKind::Func) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the module imports ", what, ", a ", wabt::GetKindName(import.type.type->kind),
          ": this vault offers functions only (the library and wasi_snapshot_preview1 modules)"));
    }
    const auto& want = *wabt::cast<wi::FuncType>(import.type.type.get());
    absl::StatusOr<HostFunction> offered = resolver(import.type.module, import.type.name);
    if (!offered.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the module imports ", what,
                       ", which this vault does not offer: ", offered.status().message()));
    }
    std::vector<ValType> params, results;
    bool typed = true;
    for (wabt::Type t : want.params) {
      absl::StatusOr<ValType> v = ToValType(t);
      typed = typed && v.ok();
      if (v.ok()) params.push_back(*v);
    }
    for (wabt::Type t : want.results) {
      absl::StatusOr<ValType> v = ToValType(t);
      typed = typed && v.ok();
      if (v.ok()) results.push_back(*v);
    }
    if (!typed || params != offered->type.params || results != offered->type.results) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the module imports ", what, " as ",
          typed ? Signature(params, results) : std::string("a function of other types"),
          "; this vault's is ", Signature(offered->type.params, offered->type.results)));
    }
    const uint32_t index = static_cast<uint32_t>(s.imports.size());
    s.imports.push_back(*std::move(offered));
    Engine* self = engine.get();
    wi::HostFunc::Ptr host = wi::HostFunc::New(
        s.store, want,
        [self, index](wi::Thread&, const wi::Values& in, wi::Values& out,
                      wi::Trap::Ptr* trap) -> wabt::Result {
          State& st = *self->state_;
          const HostFunctionType& type = st.imports[index].type;
          std::vector<uint64_t> args(in.size());
          for (size_t i = 0; i < in.size(); ++i) args[i] = Bits(in[i], type.params[i]);
          std::vector<uint64_t> results(type.results.size());
          st.in_call.emplace(index, args);
          absl::Status done = self->RunHost(index, args, /*resumed=*/false, &results);
          st.in_call.reset();
          if (!done.ok()) {
            st.host_end = done;
            *trap = wi::Trap::New(st.store, std::string(done.message()));
            return wabt::Result::Error;
          }
          for (size_t i = 0; i < out.size(); ++i) out[i] = FromBits(results[i], type.results[i]);
          return wabt::Result::Ok;
        });
    s.host_funcs.push_back(host);
    imports.push_back(host.ref());
  }
  s.imported_functions = static_cast<uint32_t>(s.imports.size());
  // Limits: memory and tables, their maximum lowered to ours; locals.
  for (wi::MemoryDesc& m : desc.memories) {
    if (m.type.limits.is_64) return absl::InvalidArgumentError("64-bit memories are not supported");
    if (m.type.limits.initial > limits.max_memory_pages) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory limit: the module's memory starts at ", m.type.limits.initial,
                       " pages of 64 KiB; this agent may have at most ", limits.max_memory_pages));
    }
    if (!m.type.limits.has_max || m.type.limits.max > limits.max_memory_pages) {
      m.type.limits.has_max = true;
      m.type.limits.max = limits.max_memory_pages;
    }
  }
  for (wi::TableDesc& t : desc.tables) {
    if (t.type.limits.initial > limits.max_table_elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("table limit: the module's table starts with ", t.type.limits.initial,
                       " elements; this agent may have at most ", limits.max_table_elements));
    }
    if (!t.type.limits.has_max || t.type.limits.max > limits.max_table_elements) {
      t.type.limits.has_max = true;
      t.type.limits.max = limits.max_table_elements;
    }
  }
  for (size_t i = 0; i < desc.funcs.size(); ++i) {
    uint64_t locals = 0;
    for (const wi::LocalDesc& l : desc.funcs[i].locals) locals += l.count;
    if (locals > limits.max_function_locals) {
      return absl::InvalidArgumentError(absl::StrCat(
          "function ", s.imported_functions + i, " declares ", locals,
          " locals; this vault runs functions of at most ", limits.max_function_locals));
    }
  }
  if (!desc.starts.empty()) s.start_function = desc.starts[0].func_index;
  desc.starts.clear();  // run by Run, under the fuel
  s.module = wi::Module::New(s.store, std::move(desc));
  wi::Trap::Ptr trap;
  s.instance = wi::Instance::Instantiate(s.store, s.module.ref(), imports, &trap);
  if (!s.instance) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the module does not instantiate: ", trap ? trap->message() : std::string("unknown")));
  }
  const wi::RefVec& funcs = s.instance->funcs();
  for (uint32_t i = 0; i < funcs.size(); ++i) s.function_of_ref[funcs[i].index] = i;
  s.thread = std::make_unique<wi::Thread>(s.store);
  std::vector<wi::Frame>& frames = s.frames();
  std::vector<wi::Frame>().swap(frames);
  frames.reserve(limits.max_call_depth);
  return engine;
}

absl::Status Engine::Start(absl::string_view entry) {
  State& s = *state_;
  if (s.prepared) return absl::FailedPreconditionError("the engine has run already");
  std::optional<uint32_t> index;
  for (const wi::ExportDesc& e : s.module->desc().exports) {
    if (e.type.type->kind == wabt::ExternalKind::Func && e.type.name == entry) index = e.index;
  }
  if (!index.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("the module exports no function ", entry, " (a WASI command exports _start)"));
  }
  if (*index < s.imported_functions) {
    return absl::InvalidArgumentError(absl::StrCat("the module's ", entry, " is an import"));
  }
  if (s.start_function.has_value() && *s.start_function >= s.imported_functions) {
    s.next_entry = std::string(entry);
    VAULT_RETURN_IF_ERROR(s.PushCall(*s.start_function));
  } else {
    VAULT_RETURN_IF_ERROR(s.PushCall(*index));
  }
  s.prepared = true;
  return absl::OkStatus();
}

absl::Status Engine::RunHost(size_t import_index, const std::vector<uint64_t>& args, bool resumed,
                             std::vector<uint64_t>* results) {
  HostCall call{*this, args, *results, resumed};
  return state_->imports[import_index].callback(call);
}

absl::Status Engine::RunPending(Outcome* outcome) {
  State& s = *state_;
  if (!s.pending.has_value()) return absl::OkStatus();
  auto [index, args] = *std::move(s.pending);
  s.pending.reset();
  const HostFunctionType& type = s.imports[index].type;
  std::vector<uint64_t> results(type.results.size());
  s.in_call.emplace(index, args);
  absl::Status done = RunHost(index, args, /*resumed=*/true, &results);
  s.in_call.reset();
  if (!done.ok()) return done;
  for (size_t i = 0; i < results.size(); ++i)
    s.values().push_back(FromBits(results[i], type.results[i]));
  (void)outcome;
  return absl::OkStatus();
}

Engine::Outcome Engine::Run() {
  State& s = *state_;
  Outcome out;
  auto ended_by_host = [&](const absl::Status& why) {
    if (auto code = why.GetPayload(kExitPayload); code.has_value()) {
      out.kind = Outcome::kExited;
      int c = 0;
      (void)absl::SimpleAtoi(std::string(*code), &c);
      out.exit_code = c;
    } else {
      out.kind = Outcome::kTrapped;
      out.message = std::string(why.message());
    }
  };
  if (!s.prepared) {
    out.kind = Outcome::kTrapped;
    out.message = "nothing to run (neither Start nor Restore was called)";
    return out;
  }
  if (absl::Status pending = RunPending(&out); !pending.ok()) {
    ended_by_host(pending);
    return out;
  }
  std::vector<wi::Frame>& frames = s.frames();
  while (true) {
    if (frames.empty()) {
      s.values().clear();
      s.refs().clear();
      if (!s.next_entry.empty()) {
        const std::string entry = std::exchange(s.next_entry, std::string());
        for (const wi::ExportDesc& e : s.module->desc().exports) {
          if (e.type.type->kind == wabt::ExternalKind::Func && e.type.name == entry) {
            if (absl::Status pushed = s.PushCall(e.index); !pushed.ok()) {
              out.kind = Outcome::kTrapped;
              out.message = std::string(pushed.message());
              return out;
            }
          }
        }
        continue;
      }
      out.kind = Outcome::kReturned;
      return out;
    }
    uint64_t n = s.limits.slice;
    if (s.limits.fuel != 0) {
      if (fuel_used_ >= s.limits.fuel) {
        out.kind = Outcome::kFuelExhausted;
        out.message = absl::StrCat("fuel exhausted (", s.limits.fuel, " instructions)");
        return out;
      }
      n = std::min<uint64_t>(n, s.limits.fuel - fuel_used_);
    }
    fuel_used_ += n;
    wi::Trap::Ptr trap;
    wi::RunResult r = s.thread->Run(static_cast<int>(n), &trap);
    if (r == wi::RunResult::Ok || r == wi::RunResult::Return) {
      if (s.values().size() > s.limits.max_stack_values) {
        out.kind = Outcome::kTrapped;
        out.message = absl::StrCat("stack exhausted (more than ", s.limits.max_stack_values,
                                   " values on the value stack)");
        return out;
      }
      if (interrupt_flag_ != nullptr && *interrupt_flag_ != 0 && !frames.empty()) {
        *interrupt_flag_ = 0;
        if (absl::Status done = interrupt_(*this); !done.ok()) {
          ended_by_host(done);
          return out;
        }
      }
      continue;
    }
    if (s.host_end.has_value()) {
      absl::Status why = *std::move(s.host_end);
      s.host_end.reset();
      ended_by_host(why);
      return out;
    }
    out.kind = Outcome::kTrapped;
    if (r == wi::RunResult::Exception) {
      out.message = "trap: uncaught exception";
    } else {
      out.message = DescribeTrap(trap ? trap->message() : std::string("unknown"));
      wi::Memory* m = s.memory();
      // A C program's stack lives in linear memory below the global __stack_pointer (global 0,
      // a mutable i32, by the toolchains' convention): one that recursed too deep wraps it below
      // zero, and its next access is out of bounds. Said as what it is.
      if (m != nullptr && absl::StartsWith(out.message, "trap: out of bounds memory access") &&
          !s.instance->globals().empty()) {
        wi::Global::Ptr sp{s.store, s.instance->globals()[0]};
        if (sp->type().type == wabt::Type::I32 && sp->type().mut == wi::Mutability::Var &&
            sp->Get().Get<uint32_t>() > m->ByteSize()) {
          out.message = absl::StrCat(
              "stack exhausted (the module's stack in linear memory "
              "overflowed: ",
              out.message.substr(6), ")");
        }
      }
      // A program whose memory.grow failed (it sees -1, as the specification says) often ends
      // with a trap of its own (abort, or a NULL from malloc used): its memory is then at or
      // near the limit, which the reason says.
      if (m != nullptr && m->type().limits.max == s.limits.max_memory_pages) {
        const uint64_t pages = m->PageSize();
        if (pages >= s.limits.max_memory_pages) {
          absl::StrAppend(&out.message, " (memory limit: the memory is at this agent's ",
                          s.limits.max_memory_pages, " pages, so a memory.grow was refused)");
        } else if (2 * pages >= s.limits.max_memory_pages) {
          absl::StrAppend(&out.message, " (near the memory limit: ", pages, " of this agent's ",
                          s.limits.max_memory_pages, " pages in use; a memory.grow past it fails)");
        }
      }
    }
    return out;
  }
}

absl::StatusOr<absl::string_view> Engine::Read(uint64_t offset, uint64_t length) const {
  wi::Memory* m = state_->memory();
  const uint64_t size = m == nullptr ? 0 : m->ByteSize();
  if (offset > size || length > size - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("out of bounds: bytes [", offset, ", +", length, ") of a memory of ", size));
  }
  if (length == 0) return absl::string_view();
  return absl::string_view(reinterpret_cast<const char*>(m->UnsafeData()) + offset, length);
}

absl::Status Engine::Write(uint64_t offset, absl::string_view bytes) {
  wi::Memory* m = state_->memory();
  const uint64_t size = m == nullptr ? 0 : m->ByteSize();
  if (offset > size || bytes.size() > size - offset) {
    return absl::InvalidArgumentError(absl::StrCat("out of bounds: bytes [", offset, ", +",
                                                   bytes.size(), ") of a memory of ", size));
  }
  if (!bytes.empty()) memcpy(m->UnsafeData() + offset, bytes.data(), bytes.size());
  return absl::OkStatus();
}

uint64_t Engine::memory_bytes() const {
  wi::Memory* m = state_->memory();
  return m == nullptr ? 0 : m->ByteSize();
}

}  // namespace vault::sandbox::wasm
