/* Pattern 4, mobile, as a wasm agent: its initial state is a route of member vaults ("vault-b
 * vault-c"); it visits each, noting what it saw there in a local array, then goes home and ends
 * with what it gathered. Nothing is saved by hand: each vault_migrate returns on the next vault
 * with the array, the loop's index and the rest of the program as they were.
 *
 *   vaultctl agent spawn sdk/wasm/examples/mobile.scm \
 *       --code build/sdk/wasm/vault_wasm_example_mobile.wasm --state route.txt */
#include <stdio.h>
#include <string.h>

#include "vault_agent.h"

/* The "vault" field of self_inspect's JSON. */
static void here(char* out, size_t cap) {
  char json[512];
  uint32_t len = 0;
  out[0] = '\0';
  if (vault_self_inspect(json, sizeof(json) - 1, &len) != VAULT_OK) return;
  json[len] = '\0';
  const char* v = strstr(json, "\"vault\":\"");
  if (v == NULL) return;
  v += 9;
  size_t n = 0;
  while (v[n] != '"' && v[n] != '\0' && n + 1 < cap) ++n;
  memcpy(out, v, n);
  out[n] = '\0';
}

int main(void) {
  char route[256];
  uint32_t len = 0;
  uint64_t total = 0;
  if (vault_get_state(0, route, sizeof(route) - 1, &len, &total) != VAULT_OK) len = 0;
  route[len] = '\0';
  char home[64], seen[8][64];
  int visits = 0;
  here(home, sizeof(home));
  printf("start at %s\n", home);
  for (char* stop = strtok(route, " \n"); stop != NULL && visits < 8; stop = strtok(NULL, " \n")) {
    const int rc = vault_migrate(stop, (int32_t)strlen(stop));
    here(seen[visits], sizeof(seen[0]));
    printf("at %s (migrate -> %d)\n", seen[visits], rc);
    fflush(stdout);
    ++visits;
  }
  vault_migrate(home, (int32_t)strlen(home));
  char result[600] = "";
  for (int i = 0; i < visits; ++i) {
    strcat(result, seen[i]);
    strcat(result, i + 1 < visits ? "," : "");
  }
  printf("home at %s having seen %s\n", home, result);
  fflush(stdout);
  vault_exit(0, "", 0, result, (int32_t)strlen(result));
  return 1;
}
