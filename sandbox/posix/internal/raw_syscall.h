// raw_syscall: system calls that never touch errno, for the sandbox's clone child.
//
// The child is cloned with CLONE_VM and without CLONE_SETTLS: it shares the supervisor thread's
// memory *and* its thread pointer, so glibc's errno in the child is the supervisor thread's
// errno, and also that of every other child of that thread still setting up. A libc wrapper
// that fails writes errno there, and reading errno afterwards may see another process's value
// (a concurrent child's EINVAL turned "mkdir: EEXIST, tolerated" into a failed setup, and could
// as well turn a real failure into a tolerated one). Everything the child runs therefore makes
// its system calls with RawSyscall, which returns the kernel's own result: the value, or a
// negative errno (-4095..-1) on failure. errno is neither written nor read.
//
//   long fd = RawSys(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC);
//   if (RawFailed(fd)) return RawErrno(fd);  // the positive errno value
//
// Thread safety: async-signal-safe; no state.
#ifndef VAULT_SANDBOX_POSIX_INTERNAL_RAW_SYSCALL_H_
#define VAULT_SANDBOX_POSIX_INTERNAL_RAW_SYSCALL_H_

#include <type_traits>

namespace vault::sandbox::internal {

inline long RawSyscall(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0,
                       long a6 = 0) noexcept {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = nr;
  register long x0 __asm__("x0") = a1;
  register long x1 __asm__("x1") = a2;
  register long x2 __asm__("x2") = a3;
  register long x3 __asm__("x3") = a4;
  register long x4 __asm__("x4") = a5;
  register long x5 __asm__("x5") = a6;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                   : "memory", "cc");
  return x0;
#else
#error "RawSyscall: only x86-64 and aarch64 are supported"
#endif
}

// Whether a RawSyscall result is a failure (-4095..-1, as the kernel returns them).
inline bool RawFailed(long r) noexcept { return r < 0 && r > -4096; }

// The positive errno value of a failed result.
inline int RawErrno(long r) noexcept { return static_cast<int>(-r); }

// One argument as the kernel takes it: pointers by address, integers and enums by value.
template <typename T>
inline long RawArg(T value) noexcept {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<long>(value);
  } else if constexpr (std::is_null_pointer_v<T>) {
    return 0;
  } else {
    return static_cast<long>(value);
  }
}

// RawSyscall with the arguments converted: RawSys(SYS_mkdirat, AT_FDCWD, path, 0755).
template <typename... Args>
inline long RawSys(long nr, Args... args) noexcept {
  static_assert(sizeof...(Args) <= 6, "a system call takes at most six arguments");
  return RawSyscall(nr, RawArg(args)...);
}

}  // namespace vault::sandbox::internal

#endif  // VAULT_SANDBOX_POSIX_INTERNAL_RAW_SYSCALL_H_
