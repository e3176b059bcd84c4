/* net_sockets: tries to open every kind of network socket, and lists the network devices.
 *
 * Prints "socket <FAMILY> <TYPE>[ <PROTOCOL>]: <ERRNO>" per attempt ("ESCAPED ..." when one
 * but AF_UNIX opens; AF_UNIX is the positive control, "...: OK"), "socketpair AF_INET: ...",
 * and "interfaces: <names from /proc/self/net/dev>". */
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hostile.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_XDP
#define AF_XDP 44
#endif

struct Attempt {
  int family;
  int type;
  int protocol;
  const char* name;
};

int main(void) {
  hostile_init();
  static const struct Attempt kAttempts[] = {
      {AF_INET, SOCK_STREAM, 0, "AF_INET SOCK_STREAM"},
      {AF_INET, SOCK_DGRAM, 0, "AF_INET SOCK_DGRAM"},
      {AF_INET, SOCK_DGRAM, IPPROTO_ICMP, "AF_INET SOCK_DGRAM IPPROTO_ICMP"},
      {AF_INET, SOCK_RAW, IPPROTO_RAW, "AF_INET SOCK_RAW IPPROTO_RAW"},
      {AF_INET6, SOCK_STREAM, 0, "AF_INET6 SOCK_STREAM"},
      {AF_INET6, SOCK_DGRAM, 0, "AF_INET6 SOCK_DGRAM"},
      {AF_PACKET, SOCK_RAW, 0, "AF_PACKET SOCK_RAW"},
      {AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, "AF_NETLINK SOCK_RAW NETLINK_ROUTE"},
      {AF_NETLINK, SOCK_RAW, NETLINK_AUDIT, "AF_NETLINK SOCK_RAW NETLINK_AUDIT"},
      {AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT, "AF_NETLINK SOCK_DGRAM NETLINK_KOBJECT_UEVENT"},
      {AF_VSOCK, SOCK_STREAM, 0, "AF_VSOCK SOCK_STREAM"},
      {AF_ALG, SOCK_SEQPACKET, 0, "AF_ALG SOCK_SEQPACKET"},
      {AF_KEY, SOCK_RAW, 2, "AF_KEY SOCK_RAW"},
      {AF_XDP, SOCK_RAW, 0, "AF_XDP SOCK_RAW"},
      {AF_BLUETOOTH, SOCK_STREAM, 0, "AF_BLUETOOTH SOCK_STREAM"},
  };
  for (size_t i = 0; i < sizeof kAttempts / sizeof kAttempts[0]; ++i) {
    char what[128];
    snprintf(what, sizeof what, "socket %s", kAttempts[i].name);
    int fd = socket(kAttempts[i].family, kAttempts[i].type | SOCK_CLOEXEC, kAttempts[i].protocol);
    expect_failure(what, fd);
    if (fd >= 0) close(fd);
  }
  int pair[2];
  int rc = socketpair(AF_INET, SOCK_STREAM, 0, pair);
  expect_failure("socketpair AF_INET SOCK_STREAM", rc);
  if (rc == 0) {
    close(pair[0]);
    close(pair[1]);
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  report("socket AF_UNIX SOCK_STREAM", fd);
  if (fd >= 0) close(fd);
  rc = socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair);
  report("socketpair AF_UNIX SOCK_DGRAM", rc);
  if (rc == 0) {
    close(pair[0]);
    close(pair[1]);
  }

  FILE* dev = fopen("/proc/self/net/dev", "re");
  if (dev == NULL) {
    say("interfaces: %s", errno_name(errno));
    return 0;
  }
  char line[512];
  char names[512] = "";
  while (fgets(line, sizeof line, dev) != NULL) {
    char* colon = strchr(line, ':');
    if (colon == NULL) continue;
    *colon = '\0';
    char* name = line;
    while (*name == ' ') ++name;
    if (names[0] != '\0') strncat(names, " ", sizeof names - strlen(names) - 1);
    strncat(names, name, sizeof names - strlen(names) - 1);
  }
  fclose(dev);
  say("interfaces: %s", names);
  return 0;
}
