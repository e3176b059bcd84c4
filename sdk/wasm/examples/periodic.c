/* Pattern 1, periodic, as a wasm agent: every PERIOD seconds (its first argument, default 60) it
 * does a round of work, here storing a record of the round in the CAS, for ROUNDS rounds (its
 * second, default 3). It sleeps by waiting for a message with a timeout; a "stop" message ends
 * it early. Its clock is the vault's (time() through the host), so a replay sees the same times.
 *
 *   vaultctl agent spawn sdk/wasm/examples/periodic.scm \
 *       --code build/sdk/wasm/vault_wasm_example_periodic.wasm */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vault_agent.h"

int main(int argc, char** argv) {
  const long period = argc > 1 ? atol(argv[1]) : 60;
  const long rounds = argc > 2 ? atol(argv[2]) : 3;
  for (long round = 1; round <= rounds; ++round) {
    char record[96];
    const int n = snprintf(record, sizeof(record), "round %ld at %lld\n", round,
                           (long long)time(NULL));
    char digest[VAULT_DIGEST_MAX];
    uint32_t len = 0;
    const int rc = vault_cas_put(record, n, digest, sizeof(digest), &len);
    printf("round %ld: stored %.*s (%d)\n", round, (int)len, digest, rc);
    fflush(stdout);
    if (round == rounds) break;
    vault_message msg;
    char data[16];
    if (vault_receive(period * 1000, &msg, data, sizeof(data)) == VAULT_OK &&
        msg.type_len == 4 && memcmp(msg.type, "stop", 4) == 0) {
      break;
    }
  }
  return 0;
}
