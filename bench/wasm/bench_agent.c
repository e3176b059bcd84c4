/* The wasm agent of wasm_bench. Its initial state names what it does:
 *   "idle"        log "up", then wait for messages forever
 *   "rtt N"       log "go", N self_inspect calls, then end
 *   "hop KIB"     fill KIB KiB of memory, log "ready", wait for a message, migrate to vault "b",
 *                 log "arrived", wait forever */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vault_agent.h"

static uint8_t memory[1 << 20];

static void say(const char* s) { vault_log(VAULT_LOG_INFO, s, (int32_t)strlen(s)); }

static void wait_message(void) {
  vault_message msg;
  char data[64];
  while (vault_receive(3600000, &msg, data, sizeof(data)) == VAULT_DEADLINE_EXCEEDED) {
  }
}

int main(void) {
  char state[64] = {0};
  uint32_t len = 0;
  uint64_t total = 0;
  vault_get_state(0, state, sizeof(state) - 1, &len, &total);
  state[len] = '\0';
  if (strncmp(state, "rtt ", 4) == 0) {
    const long n = atol(state + 4);
    char buf[512];
    uint32_t out = 0;
    say("go");
    for (long i = 0; i < n; ++i) vault_self_inspect(buf, sizeof(buf), &out);
    return 0;
  }
  if (strncmp(state, "hop ", 4) == 0) {
    const long kib = atol(state + 4);
    for (long i = 0; i < kib * 1024 && i < (long)sizeof(memory); ++i) {
      memory[i] = (uint8_t)(i * 2654435761u >> 13) | 1;
    }
    say("ready");
    wait_message();
    vault_migrate("b", 1);
    say("arrived");
    wait_message();
    return 0;
  }
  say("up");
  for (;;) wait_message();
}
