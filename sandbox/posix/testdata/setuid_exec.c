/* setuid_exec: executes the host's setuid-root programs (bound read-only into the sandbox
 * with /usr) and checks that none of them gains root.
 *
 * For each program prints "<path>: ENOENT" when absent, else
 *   "<path>: mode setuid" (or "mode plain": whether the bit is visible inside),
 *   "<path>: probe euid=1000 uid=1000 secure=0": what libsetuid_probe.so saw inside the
 *       program ("probe not loaded" would mean the loader ran it privileged),
 *   "<path>: exited" / "killed by <signal>".
 * /usr/bin/mount is asked to mount a tmpfs on /work/m: "mount via setuid: not mounted", or
 * "ESCAPED mount via setuid". */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

struct Target {
  const char* path;
  const char* argv[8];
};

static void Run(const struct Target* target, int index) {
  struct stat st;
  if (stat(target->path, &st) != 0) {
    say("%s: %s", target->path, errno_name(errno));
    return;
  }
  say("%s: mode %s", target->path, (st.st_mode & S_ISUID) ? "setuid" : "plain");
  char probe[64];
  snprintf(probe, sizeof probe, "/work/probe.%d", index);
  unlink(probe);
  pid_t pid = fork();
  if (pid < 0) {
    say("%s: fork %s", target->path, errno_name(errno));
    return;
  }
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    char preload[] = "LD_PRELOAD=/code/libsetuid_probe.so";
    char out[128];
    snprintf(out, sizeof out, "HOSTILE_PROBE_OUT=%s", probe);
    char* env[] = {preload, out, "PATH=/usr/bin:/bin", NULL};
    execve(target->path, (char* const*)target->argv, env);
    int fd = open(probe, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dprintf(fd, "exec %s\n", errno_name(errno));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  char line[256] = "not loaded";
  FILE* in = fopen(probe, "re");
  if (in != NULL) {
    if (fgets(line, sizeof line, in) != NULL) line[strcspn(line, "\n")] = '\0';
    fclose(in);
  }
  say("%s: probe %s", target->path, line);
  if (WIFSIGNALED(status)) {
    say("%s: killed by %d", target->path, WTERMSIG(status));
  } else {
    say("%s: exited", target->path);
  }
}

int main(void) {
  hostile_init();
  mkdir("/work/m", 0755);
  struct stat before;
  stat("/work/m", &before);
  static const struct Target kTargets[] = {
      {"/usr/bin/su", {"su", "-c", "id", "root", NULL}},
      {"/usr/bin/passwd", {"passwd", "-S", "root", NULL}},
      {"/usr/bin/mount", {"mount", "-t", "tmpfs", "none", "/work/m", NULL}},
      {"/usr/bin/sudo", {"sudo", "-n", "true", NULL}},
      {"/usr/bin/pkexec", {"pkexec", "true", NULL}},
  };
  for (size_t i = 0; i < sizeof kTargets / sizeof kTargets[0]; ++i) Run(&kTargets[i], (int)i);
  struct stat after;
  if (stat("/work/m", &after) == 0 && after.st_dev != before.st_dev) {
    say("ESCAPED mount via setuid");
  } else {
    say("mount via setuid: not mounted");
  }
  return 0;
}
