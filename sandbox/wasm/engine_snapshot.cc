// Engine::Capture and Engine::Restore: a run's whole state to a WasmSnapshot and back (engine.h
// says what a snapshot holds and where it can be taken).
#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "sandbox/wasm/engine.h"
#include "sandbox/wasm/internal/engine_state.h"

namespace vault::sandbox::wasm {
namespace {

constexpr uint64_t kChunkBytes = 4096;

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

}  // namespace

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
