// container_probe: run as a container's process by runc_test.cc, it reports on stdout, one line
// each, what the container lets it do. Statically linked: it is the whole image.
//
// With an argument it does one thing instead (container_sandbox_test.cc):
//   exit N          exits with N
//   sleep           sleeps until killed
//   write NAME TEXT writes TEXT to /work/NAME and /tmp/NAME, prints "wrote", exits 0
//   memory          touches memory until the limit stops it
//   spin            burns CPU until a limit stops it
//   fork            forks until the pids limit refuses, prints "fork refused after N"
//   env NAME        prints the variable's value and the working directory
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::string ReadFile(const char* path) {
  std::string out;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string("<") + strerror(errno) + ">";
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::string Field(const std::string& status, const std::string& key) {
  size_t at = status.find(key + ":");
  if (at == std::string::npos) return "?";
  size_t start = status.find_first_not_of(" \t", at + key.size() + 1);
  return status.substr(start, status.find('\n', start) - start);
}

const char* ErrnoName(int e) {
  switch (e) {
    case 0:
      return "ok";
    case EROFS:
      return "EROFS";
    case EPERM:
      return "EPERM";
    case EACCES:
      return "EACCES";
    case ENOSPC:
      return "ENOSPC";
    case EFBIG:
      return "EFBIG";
    case ENOENT:
      return "ENOENT";
    case ENXIO:
      return "ENXIO";
    default:
      return "other";
  }
}

}  // namespace

static int Mode(int argc, char** argv) {
  const std::string mode = argv[1];
  if (mode == "exit" && argc > 2) return atoi(argv[2]);
  if (mode == "sleep") {
    for (;;) pause();
  }
  if (mode == "write" && argc > 3) {
    for (const std::string dir : {"/work/", "/tmp/"}) {
      int fd = open((dir + argv[2]).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || write(fd, argv[3], strlen(argv[3])) < 0) {
        std::printf("write %s: %s\n", dir.c_str(), strerror(errno));
        return 1;
      }
      close(fd);
    }
    std::printf("wrote\n");
    return 0;
  }
  if (mode == "memory") {
    for (;;) {
      char* p = static_cast<char*>(malloc(1 << 20));
      if (p == nullptr) return 3;
      memset(p, 1, 1 << 20);
    }
  }
  if (mode == "spin") {
    volatile unsigned long x = 0;
    for (;;) x = x + 1;
  }
  if (mode == "fork") {
    int n = 0;
    for (;;) {
      pid_t pid = fork();
      if (pid < 0) break;
      if (pid == 0) {
        for (;;) pause();
      }
      ++n;
    }
    std::printf("fork refused after %d\n", n);
    std::fflush(stdout);
    return 0;
  }
  if (mode == "env" && argc > 2) {
    const char* v = getenv(argv[2]);
    char cwd[256];
    std::printf("%s=%s cwd=%s\n", argv[2], v == nullptr ? "<unset>" : v,
                getcwd(cwd, sizeof cwd) == nullptr ? "?" : cwd);
    return 0;
  }
  std::printf("unknown mode %s\n", mode.c_str());
  return 2;
}

int main(int argc, char** argv) {
  if (argc > 1) return Mode(argc, argv);
  std::printf("uid %d gid %d\n", getuid(), getgid());
  std::string map = ReadFile("/proc/self/uid_map");
  std::printf("uid_map %s", map.c_str());
  const std::string status = ReadFile("/proc/self/status");
  std::printf("CapEff %s\n", Field(status, "CapEff").c_str());
  std::printf("CapBnd %s\n", Field(status, "CapBnd").c_str());
  std::printf("NoNewPrivs %s\n", Field(status, "NoNewPrivs").c_str());
  errno = 0;
  int fd = open("/planted", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  std::printf("root_write %s\n", fd < 0 ? ErrnoName(errno) : "ok");
  errno = 0;
  int r = mount("none", "/work", "tmpfs", 0, nullptr);
  std::printf("mount %s\n", r < 0 ? ErrnoName(errno) : "ok");
  // /work: writable, and full at its size.
  fd = open("/work/fill", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  std::string block(64 << 10, 'x');
  int write_errno = 0;
  size_t written = 0;
  for (int i = 0; i < 64 && fd >= 0; ++i) {
    ssize_t n = write(fd, block.data(), block.size());
    if (n < 0) {
      write_errno = errno;
      break;
    }
    written += static_cast<size_t>(n);
  }
  std::printf("work_fill %s after %zu KiB\n", fd < 0 ? "no-file" : ErrnoName(write_errno),
              written >> 10);
  // Network interfaces.
  std::string nets;
  if (DIR* d = opendir("/sys/class/net")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      nets += std::string(nets.empty() ? "" : ",") + e->d_name;
    }
    closedir(d);
  }
  std::printf("net %s\n", nets.c_str());
  // A masked path is /dev/null bound over it (a character device), not the kernel's file.
  struct stat keys;
  std::printf("keys %s\n", stat("/proc/keys", &keys) != 0 ? "missing"
                           : S_ISCHR(keys.st_mode)        ? "masked"
                                                          : "visible");
  // What the seccomp filters refuse (and without them would get another answer).
  errno = 0;
  std::printf("ptrace %s\n",
              ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) < 0 ? ErrnoName(errno) : "ok");
  errno = 0;
  int inet = socket(AF_INET, SOCK_STREAM, 0);
  std::printf("socket_inet %s\n", inet < 0 ? ErrnoName(errno) : "ok");
  errno = 0;
  std::printf("unshare %s\n", unshare(CLONE_NEWUSER) < 0 ? ErrnoName(errno) : "ok");
  errno = 0;
  char c = 'x';
  std::printf("tiocsti %s\n", ioctl(0, TIOCSTI, &c) < 0 ? ErrnoName(errno) : "ok");
  const char hello[] = "hello over fd 3";
  std::printf("fd3 %s\n", write(3, hello, sizeof hello - 1) == sizeof hello - 1 ? "ok" : "failed");
  char cwd[256];
  std::printf("cwd %s home %s\n", getcwd(cwd, sizeof cwd), getenv("HOME"));
  std::fflush(stdout);
  return 7;
}
