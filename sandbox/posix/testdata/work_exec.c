/* work_exec: tries to run code the sandbox wrote itself: a copy of /code/hello in /work and in
 * /tmp (also given the setuid bit), and the same bytes in an anonymous memfd (fexecve).
 *
 * Prints "copy <path>: OK", "chmod 04755 <path>: <OK|ERRNO>", "<path> setuid bit: set|clear",
 * "exec <path>: <ERRNO>", "exec <path>: ran hello" or "exec <path>: started, hello did not run
 * (exit <n>)", "exec ld.so <path>: ..." (the dynamic loader asked to run the copy), and the
 * same for "memfd". Whether
 * self-written code may run is the sandbox's policy; the test pins what it is. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

static int Copy(int out) {
  int in = open("/code/hello", O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  char buffer[65536];
  ssize_t n;
  while ((n = read(in, buffer, sizeof buffer)) > 0) {
    if (write(out, buffer, (size_t)n) != n) {
      close(in);
      return -1;
    }
  }
  close(in);
  return n < 0 ? -1 : 0;
}

/* Runs the file (by path, or by descriptor when path is NULL) in a child and reports; with
 * `loaded`, runs the dynamic loader at `path` on the file `loaded` instead. The copy of hello
 * writes "hello" to the child's stdout, a pipe read here: "ran hello" means the code ran. */
static void ExecWith(const char* label, const char* path, int fd, const char* loaded) {
  int report_pipe[2], output_pipe[2];
  if (pipe2(report_pipe, O_CLOEXEC) != 0 || pipe2(output_pipe, O_CLOEXEC) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(output_pipe[1], 1);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    char* argv[] = {"hello", (char*)loaded, NULL};
    char* envp[] = {NULL};
    if (path != NULL) {
      execve(path, argv, envp);
    } else {
      fexecve(fd, argv, envp);
    }
    int error = errno;
    ssize_t ignored = write(report_pipe[1], &error, sizeof error);
    (void)ignored;
    _exit(127);
  }
  close(report_pipe[1]);
  close(output_pipe[1]);
  int error = 0;
  ssize_t n = read(report_pipe[0], &error, sizeof error);
  close(report_pipe[0]);
  char output[64] = "";
  ssize_t got = read(output_pipe[0], output, sizeof output - 1);
  if (got > 0) output[got] = '\0';
  close(output_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n == (ssize_t)sizeof error) {
    say("exec %s: %s", label, errno_name(error));
  } else if (strcmp(output, "hello\n") == 0) {
    say("exec %s: ran hello", label);
  } else {
    say("exec %s: started, hello did not run (exit %d)", label,
        WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
}

static void Exec(const char* label, const char* path, int fd) { ExecWith(label, path, fd, NULL); }

static void TryPath(const char* path) {
  char what[128];
  int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  snprintf(what, sizeof what, "copy %s", path);
  report(what, out < 0 ? -1 : Copy(out));
  if (out >= 0) close(out);
  snprintf(what, sizeof what, "chmod 04755 %s", path);
  report(what, chmod(path, 04755));
  struct stat st;
  if (stat(path, &st) == 0) say("%s setuid bit: %s", path, (st.st_mode & S_ISUID) ? "set" : "clear");
  Exec(path, path, -1);
  /* The loader is executable; it maps the file itself, so only a noexec mount stops this. */
  char label[128];
  snprintf(label, sizeof label, "ld.so %s", path);
  ExecWith(label, "/lib64/ld-linux-x86-64.so.2", -1, path);
}

int main(void) {
  hostile_init();
  TryPath("/work/hello");
  TryPath("/tmp/hello");
  int memfd = memfd_create("hostile", MFD_CLOEXEC);
  report("memfd_create", memfd);
  if (memfd >= 0) {
    report("copy memfd", Copy(memfd));
    Exec("memfd", NULL, memfd);
    close(memfd);
  }
  return 0;
}
