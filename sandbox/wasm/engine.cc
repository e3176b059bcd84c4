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
#include "sandbox/wasm/internal/thread_access.h"
#include "wabt/binary-reader.h"
#include "wabt/error-formatter.h"
#include "wabt/feature.h"
#include "wabt/interp/binary-reader-interp.h"
#include "wabt/interp/interp.h"

namespace vault::sandbox::wasm {
namespace {

namespace wi = wabt::interp;

constexpr absl::string_view kExitPayload = "vault.wasm/exit";
constexpr uint64_t kChunkBytes = 4096;

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

// `n` little-endian bytes of `v` (zeros past its eighth).
void PutLe(std::string* out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    out->push_back(i < 8 ? static_cast<char>((v >> (8 * i)) & 0xff) : '\0');
  }
}
uint64_t GetLe(absl::string_view in, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n && i < in.size(); ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return v;
}

// A raw value slot (16 bytes, little-endian as the interpreter keeps them on every host this
// project runs on: x86-64 and arm64).
std::string RawValue(const wi::Value& v) {
  std::string out(16, '\0');
  memcpy(out.data(), &v, std::min<size_t>(sizeof(v), 16));
  return out;
}
wi::Value ValueOfRaw(absl::string_view raw) {
  wi::Value v = wi::Value::Make(0u);
  memcpy(&v, raw.data(), std::min<size_t>(sizeof(v), 16));
  return v;
}

// "call stack exhausted" and the like, as the agent's end says it.
std::string DescribeTrap(const std::string& message) {
  if (message == "call stack exhausted") return "stack exhausted";
  return absl::StrCat("trap: ", message);
}

}  // namespace

struct Engine::State {
  EngineLimits limits;
  wabt::Features features;
  wi::Store store{features};
  wi::Module::Ptr module;
  wi::Instance::Ptr instance;
  std::unique_ptr<wi::Thread> thread;
  std::vector<HostFunction> imports;  // by function import index
  std::vector<wi::HostFunc::Ptr> host_funcs;
  std::optional<uint32_t> start_function;  // the module's start, run as the program's first part
  uint32_t imported_functions = 0;
  std::unordered_map<size_t, uint32_t> function_of_ref;  // Ref.index → function index
  bool prepared = false;                                 // Start or Restore done
  std::string next_entry;  // to call when the frames run out (the start function ran first)
  // The host call running now (its import and arguments), for Capture.
  std::optional<std::pair<uint32_t, std::vector<uint64_t>>> in_call;
  // A host call a restored snapshot was taken in, to make again first.
  std::optional<std::pair<uint32_t, std::vector<uint64_t>>> pending;
  // How a host callback ended the program.
  std::optional<absl::Status> host_end;

  std::vector<wi::Frame>& frames() { return internal::Frames(*thread); }
  std::vector<wi::Value>& values() { return internal::Values(*thread); }
  std::vector<uint32_t>& refs() { return internal::Refs(*thread); }

  wi::Memory* memory() {
    if (instance->memories().empty()) return nullptr;
    return store.UnsafeGet<wi::Memory>(instance->memories()[0]).get();
  }
  std::optional<uint32_t> FunctionOf(wi::Ref ref) const {
    auto it = function_of_ref.find(ref.index);
    if (it == function_of_ref.end()) return std::nullopt;
    return it->second;
  }
  absl::Status PushCall(uint32_t function) {
    wi::Ref ref = instance->funcs()[function];
    wi::DefinedFunc::Ptr f{store, ref};
    if (!f->type().params.empty()) {
      return absl::InvalidArgumentError("the entry function must take no parameters");
    }
    internal::Inst(*thread) = instance.get();
    internal::Mod(*thread) = module.get();
    frames().emplace_back(ref, static_cast<uint32_t>(values().size()), 0, f->desc().code_offset,
                          instance.get(), module.get());
    return absl::OkStatus();
  }
};

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

absl::StatusOr<vault::v1::WasmSnapshot> Engine::Capture() {
  State& s = *state_;
  std::vector<wi::Frame>& frames = s.frames();
  if (!s.prepared || frames.empty()) {
    return absl::FailedPreconditionError("nothing is running to capture");
  }
  vault::v1::WasmSnapshot out;
  out.set_format(std::string(kSnapshotFormat));
  out.set_module_sha256(module_sha256_);
  out.set_fuel_used(fuel_used_);
  out.set_host(host_state_);
  out.set_next_entry(s.next_entry);
  // Memory: its non-zero chunks, consecutive ones in one run.
  if (wi::Memory* m = s.memory(); m != nullptr) {
    out.set_memory_pages(static_cast<uint32_t>(m->PageSize()));
    const char* data = reinterpret_cast<const char*>(m->UnsafeData());
    const uint64_t size = m->ByteSize();
    vault::v1::WasmSnapshot::MemoryRun* run = nullptr;
    static const char kZero[kChunkBytes] = {};
    for (uint64_t at = 0; at < size; at += kChunkBytes) {
      const uint64_t n = std::min(kChunkBytes, size - at);
      if (memcmp(data + at, kZero, n) == 0) {
        run = nullptr;
        continue;
      }
      if (run == nullptr) {
        run = out.add_memory();
        run->set_offset(at);
      }
      run->mutable_data()->append(data + at, n);
    }
  }
  auto ref_code = [&](wi::Ref ref) -> absl::StatusOr<uint32_t> {
    if (ref == wi::Ref::Null) return 0u;
    std::optional<uint32_t> f = s.FunctionOf(ref);
    if (!f.has_value()) {
      return absl::FailedPreconditionError("a reference to something other than a function");
    }
    return *f + 1;
  };
  for (wi::Ref g : s.instance->globals()) {
    wi::Global::Ptr global{s.store, g};
    const wabt::Type t = global->type().type;
    const wi::Value v = global->Get();
    std::string bytes;
    if (t == wabt::Type::I32 || t == wabt::Type::F32) {
      PutLe(&bytes, v.Get<uint32_t>(), 4);
    } else if (t == wabt::Type::I64 || t == wabt::Type::F64) {
      PutLe(&bytes, v.Get<uint64_t>(), 8);
    } else if (t == wabt::Type::V128) {
      bytes = RawValue(v);
    } else if (t == wabt::Type::FuncRef || t == wabt::Type::ExternRef) {
      VAULT_ASSIGN_OR_RETURN(uint32_t code, ref_code(v.Get<wi::Ref>()));
      PutLe(&bytes, code, 4);
    } else {
      return absl::FailedPreconditionError(absl::StrCat("a global of type ", t.GetName()));
    }
    out.add_globals(std::move(bytes));
  }
  for (wi::Ref t : s.instance->tables()) {
    wi::Table::Ptr table{s.store, t};
    vault::v1::WasmSnapshot::Table* saved = out.add_tables();
    for (wi::Ref e : table->elements()) {
      VAULT_ASSIGN_OR_RETURN(uint32_t code, ref_code(e));
      saved->add_elements(code);
    }
  }
  // The stack: without the host frame of a call in progress (made again on restore).
  size_t depth = frames.size();
  if (frames.back().inst == nullptr) {
    if (!s.in_call.has_value()) return absl::InternalError("a host frame without a host call");
    --depth;
    vault::v1::WasmSnapshot::Pending* p = out.mutable_pending();
    p->set_import(s.in_call->first);
    for (uint64_t a : s.in_call->second) PutLe(p->mutable_params(), a, 8);
  }
  for (size_t i = 0; i < depth; ++i) {
    std::optional<uint32_t> f = s.FunctionOf(frames[i].func);
    if (!f.has_value() || frames[i].inst == nullptr) {
      return absl::InternalError("a frame of no function of the module");
    }
    vault::v1::WasmSnapshot::Frame* saved = out.add_frames();
    saved->set_function(*f);
    saved->set_offset(frames[i].offset);
    saved->set_values(frames[i].values);
  }
  std::vector<wi::Value>& values = s.values();
  std::string* raw = out.mutable_values();
  raw->reserve(values.size() * 16);
  std::vector<bool> is_ref(values.size(), false);
  for (uint32_t slot : s.refs()) {
    if (slot < values.size()) is_ref[slot] = true;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (is_ref[i]) {
      VAULT_ASSIGN_OR_RETURN(uint32_t code, ref_code(values[i].Get<wi::Ref>()));
      std::string bytes;
      PutLe(&bytes, code, 16);
      raw->append(bytes);
      out.add_function_refs(static_cast<uint32_t>(i));
    } else {
      raw->append(RawValue(values[i]));
    }
  }
  for (uint32_t i = 0; i < s.instance->datas().size(); ++i) {
    const wi::DataSegment& d = s.instance->datas()[i];
    if (d.size() == 0 && !d.desc().data.empty()) out.add_dropped_data(i);
  }
  for (uint32_t i = 0; i < s.instance->elems().size(); ++i) {
    const wi::ElemSegment& e = s.instance->elems()[i];
    if (e.size() == 0 && !e.desc().elements.empty()) out.add_dropped_elems(i);
  }
  return out;
}

absl::Status Engine::Restore(const vault::v1::WasmSnapshot& snap) {
  State& s = *state_;
  if (s.prepared) return absl::FailedPreconditionError("the engine has run already");
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: ", why));
  };
  if (snap.format() != kSnapshotFormat) {
    return bad(absl::StrCat("its format is \"", snap.format(), "\"; this vault reads \"",
                            kSnapshotFormat, "\""));
  }
  if (snap.module_sha256() != module_sha256_) return bad("it is of another module");
  // Memory.
  wi::Memory* m = s.memory();
  if (m == nullptr) {
    if (snap.memory_pages() != 0 || snap.memory_size() != 0)
      return bad("memory, but the module has none");
  } else {
    if (snap.memory_pages() > s.limits.max_memory_pages || snap.memory_pages() < m->PageSize()) {
      return bad(absl::StrCat("memory of ", snap.memory_pages(), " pages does not fit (",
                              m->PageSize(), " to ", s.limits.max_memory_pages, ")"));
    }
    if (snap.memory_pages() > m->PageSize() &&
        wabt::Failed(m->Grow(snap.memory_pages() - m->PageSize()))) {
      return bad("its memory cannot grow to its size");
    }
    uint8_t* data = m->UnsafeData();
    const uint64_t size = m->ByteSize();
    if (size > 0) memset(data, 0, size);
    for (const auto& run : snap.memory()) {
      if (run.offset() > size || run.data().size() > size - run.offset()) {
        return bad("a memory run past the memory's end");
      }
      memcpy(data + run.offset(), run.data().data(), run.data().size());
    }
  }
  auto ref_of = [&](uint64_t code) -> absl::StatusOr<wi::Ref> {
    if (code == 0) return wi::Ref::Null;
    if (code - 1 >= s.instance->funcs().size()) return bad("a reference to no function");
    return s.instance->funcs()[code - 1];
  };
  // Globals.
  const wi::RefVec& globals = s.instance->globals();
  if (static_cast<size_t>(snap.globals_size()) != globals.size())
    return bad("another number of globals");
  for (size_t i = 0; i < globals.size(); ++i) {
    wi::Global::Ptr global{s.store, globals[i]};
    const wabt::Type t = global->type().type;
    const std::string& b = snap.globals(static_cast<int>(i));
    wi::Value v;
    if ((t == wabt::Type::I32 || t == wabt::Type::F32) && b.size() == 4) {
      v = wi::Value::Make(static_cast<uint32_t>(GetLe(b, 4)));
    } else if ((t == wabt::Type::I64 || t == wabt::Type::F64) && b.size() == 8) {
      v = wi::Value::Make(GetLe(b, 8));
    } else if (t == wabt::Type::V128 && b.size() == 16) {
      v = ValueOfRaw(b);
    } else if ((t == wabt::Type::FuncRef || t == wabt::Type::ExternRef) && b.size() == 4) {
      VAULT_ASSIGN_OR_RETURN(wi::Ref r, ref_of(GetLe(b, 4)));
      if (t == wabt::Type::ExternRef && r != wi::Ref::Null) return bad("an externref global");
      v = wi::Value::Make(r);
    } else {
      return bad(absl::StrCat("global ", i, " is not of its type's size"));
    }
    global->UnsafeSet(v);
  }
  // Tables.
  const wi::RefVec& tables = s.instance->tables();
  if (static_cast<size_t>(snap.tables_size()) != tables.size())
    return bad("another number of tables");
  for (size_t i = 0; i < tables.size(); ++i) {
    wi::Table::Ptr table{s.store, tables[i]};
    const auto& saved = snap.tables(static_cast<int>(i));
    const uint32_t want = static_cast<uint32_t>(saved.elements_size());
    if (want < table->size() || want > s.limits.max_table_elements) {
      return bad(absl::StrCat("table ", i, " of ", want, " elements does not fit"));
    }
    if (want > table->size() &&
        wabt::Failed(table->Grow(s.store, want - table->size(), wi::Ref::Null))) {
      return bad("a table cannot grow to its size");
    }
    for (uint32_t e = 0; e < want; ++e) {
      VAULT_ASSIGN_OR_RETURN(wi::Ref r, ref_of(saved.elements(static_cast<int>(e))));
      if (wabt::Failed(table->Set(s.store, e, r))) return bad("a table element of another type");
    }
  }
  for (uint32_t d : snap.dropped_data()) {
    if (d >= s.instance->datas().size()) return bad("a dropped data segment that is not there");
    s.instance->datas()[d].Drop();
  }
  for (uint32_t e : snap.dropped_elems()) {
    if (e >= s.instance->elems().size()) return bad("a dropped element segment that is not there");
    s.instance->elems()[e].Drop();
  }
  // The stacks.
  const std::string& raw = snap.values();
  if (raw.size() % 16 != 0 || raw.size() / 16 > s.limits.max_stack_values) {
    return bad("a value stack that is not whole values, or too deep");
  }
  const uint32_t nvalues = static_cast<uint32_t>(raw.size() / 16);
  if (snap.frames_size() == 0) return bad("no frames");
  if (static_cast<uint32_t>(snap.frames_size()) > s.limits.max_call_depth) {
    return bad("a call stack deeper than this agent's limit");
  }
  std::vector<wi::Frame>& frames = s.frames();
  std::vector<wi::Value>& values = s.values();
  std::vector<uint32_t>& refs = s.refs();
  frames.clear();
  values.clear();
  refs.clear();
  const wabt::interp::Istream::Offset code_end = s.module->desc().istream.end();
  uint32_t last_height = 0;
  for (const auto& f : snap.frames()) {
    if (f.function() < s.imported_functions || f.function() >= s.instance->funcs().size()) {
      return bad("a frame of no function of the module");
    }
    if (f.offset() >= code_end) return bad("a frame's offset past the module's code");
    if (f.values() < last_height || f.values() > nvalues) return bad("a frame's stack height");
    last_height = f.values();
    frames.emplace_back(s.instance->funcs()[f.function()], f.values(), 0, f.offset(),
                        s.instance.get(), s.module.get());
  }
  values.reserve(nvalues);
  for (uint32_t i = 0; i < nvalues; ++i)
    values.push_back(ValueOfRaw(absl::string_view(raw).substr(i * 16, 16)));
  uint32_t last_ref = 0;
  for (int i = 0; i < snap.function_refs_size(); ++i) {
    const uint32_t slot = snap.function_refs(i);
    if (slot >= nvalues || (i > 0 && slot <= last_ref)) return bad("a reference slot out of order");
    last_ref = slot;
    VAULT_ASSIGN_OR_RETURN(wi::Ref r,
                           ref_of(GetLe(absl::string_view(raw).substr(slot * 16, 4), 4)));
    values[slot] = wi::Value::Make(r);
    refs.push_back(slot);
  }
  internal::Inst(*s.thread) = s.instance.get();
  internal::Mod(*s.thread) = s.module.get();
  if (snap.has_pending()) {
    const auto& p = snap.pending();
    if (p.import() >= s.imports.size()) return bad("a pending call of no import");
    const HostFunctionType& type = s.imports[p.import()].type;
    if (p.params().size() != type.params.size() * 8) return bad("a pending call's arguments");
    std::vector<uint64_t> args;
    for (size_t i = 0; i < type.params.size(); ++i)
      args.push_back(GetLe(absl::string_view(p.params()).substr(i * 8, 8), 8));
    s.pending.emplace(p.import(), std::move(args));
  }
  if (!snap.next_entry().empty()) s.next_entry = snap.next_entry();
  fuel_used_ = snap.fuel_used();
  host_state_ = snap.host();
  s.prepared = true;
  return absl::OkStatus();
}

}  // namespace vault::sandbox::wasm
