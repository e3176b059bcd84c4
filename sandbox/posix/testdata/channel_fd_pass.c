/* channel_fd_pass: sends the host descriptors over the channel (fd 3) with SCM_RIGHTS: a
 * descriptor of /work and one end of a new socketpair, attached to a valid frame "fds".
 * Then sends SCM_CREDENTIALS with a second frame "creds".
 *
 * Prints "sendmsg SCM_RIGHTS: OK" (or the ERRNO) and "sendmsg SCM_CREDENTIALS: ...", then waits
 * up to 5 s for the host to close the channel and prints "channel closed by host" (or
 * "channel still open"). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hostile.h"

static long Send(const char* payload, int level, int type, const void* data, size_t size) {
  unsigned char frame[64];
  size_t length = strlen(payload);
  frame[0] = 0;
  frame[1] = 0;
  frame[2] = 0;
  frame[3] = (unsigned char)length;
  memcpy(frame + 4, payload, length);
  struct iovec iov = {frame, 4 + length};
  union {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(64)];
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1};
  message.msg_control = control.bytes;
  message.msg_controllen = CMSG_SPACE(size);
  struct cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = level;
  header->cmsg_type = type;
  header->cmsg_len = CMSG_LEN(size);
  memcpy(CMSG_DATA(header), data, size);
  return sendmsg(3, &message, MSG_NOSIGNAL);
}

int main(void) {
  hostile_init();
  int fds[2];
  fds[0] = open("/work", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    say("socketpair: %s", errno_name(errno));
    return 1;
  }
  fds[1] = pair[0];
  report("sendmsg SCM_RIGHTS", Send("fds", SOL_SOCKET, SCM_RIGHTS, fds, sizeof fds));
  struct ucred credentials = {getpid(), getuid(), getgid()};
  int on = 1;
  setsockopt(3, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
  report("sendmsg SCM_CREDENTIALS",
         Send("creds", SOL_SOCKET, SCM_CREDENTIALS, &credentials, sizeof credentials));
  struct pollfd channel = {3, POLLRDHUP, 0};
  int ready = poll(&channel, 1, 5000);
  say("channel %s", ready > 0 ? "closed by host" : "still open");
  return 0;
}
