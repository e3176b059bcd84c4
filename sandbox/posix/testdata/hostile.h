/* hostile.h: shared helpers for the hostile corpus (programs that attack the sandbox).
 *
 * Every program prints one line per attempt on stdout, "<what>: <ERRNO NAME>" or "<what>: OK",
 * and exits 0 once it has made its attempts: hostile_*_test.cc decides whether the outcome is
 * contained. A program that notices its own success prints a line starting with "ESCAPED".
 *
 * These programs are only ever run inside LinuxSandbox by hostile_test. The destructive ones
 * call hostile_require_sandbox() first and refuse to run when they are not visibly inside one
 * (a small PID in a fresh PID namespace, uid 1000), so that an accidental run on the host does
 * no harm. */
#ifndef VAULT_SANDBOX_TESTDATA_HOSTILE_H_
#define VAULT_SANDBOX_TESTDATA_HOSTILE_H_

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The symbolic name of an errno value ("ENOENT"), or "E<number>" for one not listed. */
static inline const char* errno_name(int e) {
  switch (e) {
#define HOSTILE_ERRNO(x) \
  case x:                \
    return #x;
    HOSTILE_ERRNO(EPERM)
    HOSTILE_ERRNO(ENOENT)
    HOSTILE_ERRNO(ESRCH)
    HOSTILE_ERRNO(EINTR)
    HOSTILE_ERRNO(EIO)
    HOSTILE_ERRNO(ENXIO)
    HOSTILE_ERRNO(E2BIG)
    HOSTILE_ERRNO(ENOEXEC)
    HOSTILE_ERRNO(EBADF)
    HOSTILE_ERRNO(ECHILD)
    HOSTILE_ERRNO(EAGAIN)
    HOSTILE_ERRNO(ENOMEM)
    HOSTILE_ERRNO(EACCES)
    HOSTILE_ERRNO(EFAULT)
    HOSTILE_ERRNO(ENOTBLK)
    HOSTILE_ERRNO(EBUSY)
    HOSTILE_ERRNO(EEXIST)
    HOSTILE_ERRNO(EXDEV)
    HOSTILE_ERRNO(ENODEV)
    HOSTILE_ERRNO(ENOTDIR)
    HOSTILE_ERRNO(EISDIR)
    HOSTILE_ERRNO(EINVAL)
    HOSTILE_ERRNO(ENFILE)
    HOSTILE_ERRNO(EMFILE)
    HOSTILE_ERRNO(ENOTTY)
    HOSTILE_ERRNO(ETXTBSY)
    HOSTILE_ERRNO(EFBIG)
    HOSTILE_ERRNO(ENOSPC)
    HOSTILE_ERRNO(ESPIPE)
    HOSTILE_ERRNO(EROFS)
    HOSTILE_ERRNO(EMLINK)
    HOSTILE_ERRNO(EPIPE)
    HOSTILE_ERRNO(EDOM)
    HOSTILE_ERRNO(ERANGE)
    HOSTILE_ERRNO(EDEADLK)
    HOSTILE_ERRNO(ENAMETOOLONG)
    HOSTILE_ERRNO(ENOLCK)
    HOSTILE_ERRNO(ENOSYS)
    HOSTILE_ERRNO(ENOTEMPTY)
    HOSTILE_ERRNO(ELOOP)
    HOSTILE_ERRNO(ENOMSG)
    HOSTILE_ERRNO(EIDRM)
    HOSTILE_ERRNO(ENOSTR)
    HOSTILE_ERRNO(ENODATA)
    HOSTILE_ERRNO(ENOLINK)
    HOSTILE_ERRNO(EPROTO)
    HOSTILE_ERRNO(EBADMSG)
    HOSTILE_ERRNO(EOVERFLOW)
    HOSTILE_ERRNO(EILSEQ)
    HOSTILE_ERRNO(EUSERS)
    HOSTILE_ERRNO(ENOTSOCK)
    HOSTILE_ERRNO(EDESTADDRREQ)
    HOSTILE_ERRNO(EMSGSIZE)
    HOSTILE_ERRNO(EPROTOTYPE)
    HOSTILE_ERRNO(ENOPROTOOPT)
    HOSTILE_ERRNO(EPROTONOSUPPORT)
    HOSTILE_ERRNO(ESOCKTNOSUPPORT)
    HOSTILE_ERRNO(EOPNOTSUPP)
    HOSTILE_ERRNO(EPFNOSUPPORT)
    HOSTILE_ERRNO(EAFNOSUPPORT)
    HOSTILE_ERRNO(EADDRINUSE)
    HOSTILE_ERRNO(EADDRNOTAVAIL)
    HOSTILE_ERRNO(ENETDOWN)
    HOSTILE_ERRNO(ENETUNREACH)
    HOSTILE_ERRNO(ENETRESET)
    HOSTILE_ERRNO(ECONNABORTED)
    HOSTILE_ERRNO(ECONNRESET)
    HOSTILE_ERRNO(ENOBUFS)
    HOSTILE_ERRNO(EISCONN)
    HOSTILE_ERRNO(ENOTCONN)
    HOSTILE_ERRNO(ETIMEDOUT)
    HOSTILE_ERRNO(ECONNREFUSED)
    HOSTILE_ERRNO(EHOSTDOWN)
    HOSTILE_ERRNO(EHOSTUNREACH)
    HOSTILE_ERRNO(EALREADY)
    HOSTILE_ERRNO(EINPROGRESS)
    HOSTILE_ERRNO(ESTALE)
    HOSTILE_ERRNO(EDQUOT)
    HOSTILE_ERRNO(ECANCELED)
    HOSTILE_ERRNO(ENOKEY)
    HOSTILE_ERRNO(EKEYEXPIRED)
    HOSTILE_ERRNO(EKEYREVOKED)
    HOSTILE_ERRNO(EKEYREJECTED)
    HOSTILE_ERRNO(EOWNERDEAD)
    HOSTILE_ERRNO(ENOTRECOVERABLE)
    HOSTILE_ERRNO(ERFKILL)
    HOSTILE_ERRNO(EHWPOISON)
#undef HOSTILE_ERRNO
    default: {
      static char buffer[32];
      snprintf(buffer, sizeof buffer, "E%d", e);
      return buffer;
    }
  }
}

/* Line-buffered stdout: one write per line, so nothing is duplicated by fork or lost when a
 * signal ends the program. Call first in main. */
static inline void hostile_init(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

/* Prints one line: printf-style text, no newline needed. */
static inline void say(const char* format, ...) __attribute__((format(printf, 1, 2)));
static inline void say(const char* format, ...) {
  va_list args;
  va_start(args, format);
  vprintf(format, args);
  va_end(args);
  putchar('\n');
  fflush(stdout);
}

/* Prints "<what>: OK" when rc >= 0, else "<what>: <errno name>" (errno read at once). */
static inline void report(const char* what, long rc) {
  int e = errno;
  if (rc >= 0) {
    say("%s: OK", what);
  } else {
    say("%s: %s", what, errno_name(e));
  }
}

/* Like report, but success is an escape: "ESCAPED <what>". */
static inline void expect_failure(const char* what, long rc) {
  int e = errno;
  if (rc >= 0) {
    say("ESCAPED %s", what);
  } else {
    say("%s: %s", what, errno_name(e));
  }
}

/* Whether this process is uid 0 of a user namespace whose only mapping sends it to an
 * unprivileged host uid ("0 <uid> 1" in /proc/self/uid_map): a container agent's (the container
 * sandbox type runs the corpus too). The host's own map is "0 0 4294967295". */
static inline int hostile_in_container_userns(void) {
  FILE* f = fopen("/proc/self/uid_map", "r");
  if (f == NULL) return 0;
  unsigned long inside = 1, outside = 0, count = 0;
  int fields = fscanf(f, "%lu %lu %lu", &inside, &outside, &count);
  int more = fgetc(f) == '\n' && fgetc(f) == EOF;
  fclose(f);
  return fields == 3 && more && inside == 0 && outside != 0 && count == 1;
}

/* Refuses (exit 3) unless this process is visibly inside the sandbox: uid and euid 1000 (a
 * posix sandbox) or 0 of a container's single-id user namespace, and a small PID (a fresh PID
 * namespace). Every destructive program calls this before doing anything. */
static inline void hostile_require_sandbox(void) {
  int posix = getuid() == 1000 && geteuid() == 1000;
  int container = getuid() == 0 && geteuid() == 0 && hostile_in_container_userns();
  if (!(posix || container) || getpid() > 100) {
    say("REFUSED: not inside the sandbox (uid %d euid %d pid %d)", (int)getuid(), (int)geteuid(),
        (int)getpid());
    exit(3);
  }
}

#endif /* VAULT_SANDBOX_TESTDATA_HOSTILE_H_ */
