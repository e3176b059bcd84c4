/* keyring: tries the kernel keyring (shared across the machine per uid, and a source of
 * kernel bugs).
 *
 * Prints "add_key: <ERRNO>", "request_key: <ERRNO>", "keyctl <op>: <ERRNO>"; "ESCAPED" on
 * success. */
#include <linux/keyctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  expect_failure("add_key", syscall(SYS_add_key, "user", "hostile", "secret", 6,
                                    KEY_SPEC_SESSION_KEYRING));
  expect_failure("request_key", syscall(SYS_request_key, "user", "hostile", NULL,
                                        KEY_SPEC_SESSION_KEYRING));
  expect_failure("keyctl GET_KEYRING_ID user",
                 syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0));
  expect_failure("keyctl JOIN_SESSION_KEYRING",
                 syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "hostile"));
  expect_failure("keyctl READ user keyring",
                 syscall(SYS_keyctl, KEYCTL_READ, KEY_SPEC_USER_KEYRING, NULL, 0));
  return 0;
}
