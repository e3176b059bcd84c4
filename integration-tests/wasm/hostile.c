/* Hostile wasm (integration-tests/wasm_test.cc): each mode, named by the initial state, tries to
 * break a limit of the wasm sandbox; each must end the agent with its own reason while the vault
 * and the runner are unaffected. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vault_agent.h"

static volatile int sink;
static char* volatile kept; /* so that the allocations are not optimized away */

static int recurse(int n) {
  volatile char pad[64];
  pad[n % 64] = (char)n;
  if (sink == -12345) return 0; /* never: the recursion has no end */
  return recurse(n + 1) + pad[0];
}

int main(void) {
  char mode[64] = {0};
  uint32_t len = 0;
  uint64_t total = 0;
  vault_get_state(0, mode, sizeof(mode) - 1, &len, &total);
  mode[len] = '\0';
  if (strcmp(mode, "loop") == 0) {
    for (;;) sink++;
  } else if (strcmp(mode, "recurse") == 0) {
    sink = recurse(0);
  } else if (strcmp(mode, "grow") == 0) {
    /* memory.grow until it fails, then touch past the end */
    long pages = 0;
    while (__builtin_wasm_memory_grow(0, 1) != (size_t)-1) ++pages;
    printf("grew %ld pages\n", pages);
    fflush(stdout);
    volatile uint8_t* end = (volatile uint8_t*)(__builtin_wasm_memory_size(0) * 65536);
    sink = end[0];
  } else if (strcmp(mode, "malloc") == 0) {
    for (;;) {
      char* p = malloc(1 << 20);
      if (p == NULL) abort();
      memset(p, 1, 1 << 20);
      kept = p;
    }
  } else if (strcmp(mode, "divide") == 0) {
    volatile int num = 7, zero = 0;
    sink = num / zero;
  } else if (strcmp(mode, "badpointer") == 0) {
    /* a host call given memory it does not have: INVALID_ARGUMENT, not a crash */
    int rc = vault_log(VAULT_LOG_INFO, (const char*)0x7ffffff0, 4096);
    printf("log with a bad pointer -> %d\n", rc);
    fflush(stdout);
    return rc == VAULT_INVALID_ARGUMENT ? 0 : 1;
  } else if (strcmp(mode, "badtext") == 0) {
    /* bytes that are not UTF-8: a log line keeps them escaped, a message's address refuses them */
    vault_log(VAULT_LOG_INFO, "\xff\xfe ok", 5);
    uint64_t id = 0;
    int rc = vault_send("\xff", 1, "t", 1, "", 0, 0, &id);
    printf("send to bad text -> %d\n", rc);
    fflush(stdout);
    return rc == VAULT_INVALID_ARGUMENT ? 0 : 1;
  } else if (strcmp(mode, "nocas") == 0) {
    char digest[VAULT_DIGEST_MAX];
    uint32_t n = 0;
    int rc = vault_cas_put("x", 1, digest, sizeof(digest), &n);
    printf("cas_put without the grant -> %d\n", rc);
    fflush(stdout);
    return rc == VAULT_PERMISSION_DENIED ? 0 : 1;
  }
  printf("unknown mode %s\n", mode);
  return 2;
}
