/* net_connect: tries to reach listeners the test runs on the host's loopback.
 *
 *   net_connect TCP_PORT UDP_PORT
 *
 * Prints "tcp connect 127.0.0.1:<port>: <ERRNO>" (the error of whichever step failed; a
 * connection prints "ESCAPED"), "tcp connect [::1]:<port>: ...", "udp send 127.0.0.1:<port>:
 * <ERRNO>" (a sent datagram prints "OK": the test checks that it never arrived). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hostile.h"

static void Tcp4(int port) {
  char what[128];
  snprintf(what, sizeof what, "tcp connect 127.0.0.1:%d", port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    expect_failure(what, -1);
    return;
  }
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  expect_failure(what, connect(fd, (struct sockaddr*)&address, sizeof address));
  close(fd);
}

static void Tcp6(int port) {
  char what[128];
  snprintf(what, sizeof what, "tcp connect [::1]:%d", port);
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    expect_failure(what, -1);
    return;
  }
  struct sockaddr_in6 address = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
  address.sin6_addr = in6addr_loopback;
  expect_failure(what, connect(fd, (struct sockaddr*)&address, sizeof address));
  close(fd);
}

static void Udp4(int port) {
  char what[128];
  snprintf(what, sizeof what, "udp send 127.0.0.1:%d", port);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    report(what, -1);
    return;
  }
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  report(what, sendto(fd, "hostile", 7, 0, (struct sockaddr*)&address, sizeof address));
  close(fd);
}

int main(int argc, char** argv) {
  hostile_init();
  if (argc < 3) return 2;
  Tcp4(atoi(argv[1]));
  Tcp6(atoi(argv[1]));
  Udp4(atoi(argv[2]));
  return 0;
}
