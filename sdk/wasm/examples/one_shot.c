/* Pattern 2, one-shot, as a wasm agent: CAS in, CAS out. Its initial state is an object's digest
 * ("sha256:<hex>/<size>"); it counts the object's words and ends with "N words\n" as its result.
 *
 *   vaultctl cas put input.txt > input-digest          (the digest is the initial state)
 *   vaultctl agent spawn sdk/wasm/examples/one_shot.scm \
 *       --code build/sdk/wasm/vault_wasm_example_one_shot.wasm --state input-digest */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "vault_agent.h"

static char input[1 << 16];

int main(void) {
  char digest[VAULT_DIGEST_MAX + 1];
  uint32_t len = 0;
  uint64_t total = 0;
  if (vault_get_state(0, digest, VAULT_DIGEST_MAX, &len, &total) != VAULT_OK) {
    fprintf(stderr, "no input: spawn me with the input's digest as my state\n");
    return 2;
  }
  while (len > 0 && isspace((unsigned char)digest[len - 1])) --len;
  long words = 0;
  int in_word = 0;
  uint64_t offset = 0;
  for (;;) {
    uint32_t got = 0;
    int rc = vault_cas_get(digest, (int32_t)len, offset, input, sizeof(input), &got);
    if (rc != VAULT_OK) {
      fprintf(stderr, "cas_get: code %d\n", rc);
      return 1;
    }
    if (got == 0) break;
    for (uint32_t i = 0; i < got; ++i) {
      const int space = isspace((unsigned char)input[i]);
      if (!space && !in_word) ++words;
      in_word = !space;
    }
    offset += got;
  }
  char result[32];
  int n = snprintf(result, sizeof(result), "%ld words\n", words);
  printf("counted %ld words\n", words);
  fflush(stdout);
  vault_exit(0, "", 0, result, n);
  return 1;
}
