/* abstract_unix: tries to reach host Unix sockets.
 *
 *   abstract_unix NAME PATH
 *
 * NAME is an abstract socket the test listens on (stream; NAME.dgram for datagrams), PATH a
 * filesystem socket it listens on. Prints "connect @NAME: <ERRNO>", "sendto @NAME.dgram:
 * <ERRNO>", "connect PATH: <ERRNO>" and the same for a few well-known host sockets; a
 * connection prints "ESCAPED". */
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "hostile.h"

static socklen_t Address(const char* name, int abstract, struct sockaddr_un* address) {
  memset(address, 0, sizeof *address);
  address->sun_family = AF_UNIX;
  size_t length = strlen(name);
  if (length > sizeof address->sun_path - 2) length = sizeof address->sun_path - 2;
  memcpy(address->sun_path + (abstract ? 1 : 0), name, length);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + length + (abstract ? 1 : 0));
}

static void Connect(const char* name, int abstract) {
  char what[256];
  snprintf(what, sizeof what, "connect %s%s", abstract ? "@" : "", name);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    say("%s: socket %s", what, errno_name(errno));
    return;
  }
  struct sockaddr_un address;
  socklen_t length = Address(name, abstract, &address);
  expect_failure(what, connect(fd, (struct sockaddr*)&address, length));
  close(fd);
}

static void SendDatagram(const char* name) {
  char what[256];
  snprintf(what, sizeof what, "sendto @%s", name);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    say("%s: socket %s", what, errno_name(errno));
    return;
  }
  struct sockaddr_un address;
  socklen_t length = Address(name, 1, &address);
  expect_failure(what, sendto(fd, "hostile", 7, 0, (struct sockaddr*)&address, length));
  close(fd);
}

int main(int argc, char** argv) {
  hostile_init();
  if (argc < 3) return 2;
  Connect(argv[1], 1);
  char dgram[200];
  snprintf(dgram, sizeof dgram, "%s.dgram", argv[1]);
  SendDatagram(dgram);
  Connect(argv[2], 0);
  Connect("/run/systemd/private", 0);
  Connect("/run/dbus/system_bus_socket", 0);
  Connect("/var/run/docker.sock", 0);
  Connect("/tmp/.X11-unix/X0", 1);
  return 0;
}
