/* Pattern 3, reactive, as a wasm agent: it answers each "task" message with its text upper-cased
 * (a "result" message to the sender), and ends at a "stop" message.
 *
 *   vaultctl agent spawn sdk/wasm/examples/reactive.scm \
 *       --code build/sdk/wasm/vault_wasm_example_reactive.wasm
 *   vaultctl agent query ID task --data note.txt         (the answer is the upper-cased text) */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "vault_agent.h"

static char data[1 << 16];

int main(void) {
  printf("waiting for tasks\n");
  fflush(stdout);
  for (;;) {
    vault_message msg;
    int rc = vault_receive(60000, &msg, data, sizeof(data));
    if (rc == VAULT_DEADLINE_EXCEEDED) continue;
    if (rc != VAULT_OK) {
      fprintf(stderr, "receive: code %d\n", rc);
      return 1;
    }
    if (msg.type_len == 4 && memcmp(msg.type, "stop", 4) == 0) break;
    for (uint32_t i = 0; i < msg.data_len; ++i) data[i] = (char)toupper((unsigned char)data[i]);
    uint64_t id = 0;
    rc = vault_send(msg.from, (int32_t)msg.from_len, "result", 6, data, (int32_t)msg.data_len,
                    msg.id, &id);
    printf("did a task of %u bytes for %.*s: %d\n", msg.data_len, (int)msg.from_len, msg.from, rc);
    fflush(stdout);
  }
  printf("stopped\n");
  return 0;
}
