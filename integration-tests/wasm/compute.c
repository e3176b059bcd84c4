/* A deterministic computation for the strong-mobility tests (integration-tests/wasm_test.cc): it
 * stirs 1 MiB of memory with a generator for STEPS steps, printing its progress, and ends with
 * the memory's FNV-1a hash as its result. Its initial state is a plan of "VAULT@STEP" (migrate to
 * VAULT at that step), "checkpoint@STEP" and "wait@STEP" (until a message comes) words; each
 * happens three calls deep, in the middle of the loop, so the hop carries locals, a call stack,
 * memory and globals. Wherever it ran, the result and the progress lines are those of a run that
 * never moved. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vault_agent.h"

#define STEPS 200000
#define MEMORY (1 << 20)

static uint8_t memory[MEMORY];
static uint64_t generator = 0x9e3779b97f4a7c15ull;
static int moves = 0;

static uint64_t next(void) {
  uint64_t z = (generator += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t fnv(void) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < MEMORY; ++i) h = (h ^ memory[i]) * 0x100000001b3ull;
  return h;
}

/* The plan: up to 16 actions. */
static char plan_what[16][32];
static long plan_step[16];
static int plan_count = 0;

static void read_plan(void) {
  static char state[1024];
  uint32_t len = 0;
  uint64_t total = 0;
  if (vault_get_state(0, state, sizeof(state) - 1, &len, &total) != VAULT_OK) return;
  state[len] = '\0';
  for (char* word = strtok(state, " \n"); word != NULL && plan_count < 16;
       word = strtok(NULL, " \n")) {
    char* at = strchr(word, '@');
    if (at == NULL) continue;
    *at = '\0';
    snprintf(plan_what[plan_count], sizeof(plan_what[0]), "%s", word);
    plan_step[plan_count] = atol(at + 1);
    ++plan_count;
  }
}

/* Three calls deep, with locals of its own on each level. */
static int act(const char* what, long step, int depth, uint64_t salt) {
  volatile uint64_t local = salt ^ (uint64_t)step;
  if (depth > 0) return act(what, step, depth - 1, local * 31 + (uint64_t)depth);
  int rc;
  if (strcmp(what, "checkpoint") == 0) {
    rc = vault_checkpoint();
  } else if (strcmp(what, "wait") == 0) {
    /* until a message comes */
    vault_message msg;
    char data[64];
    do {
      rc = vault_receive(60000, &msg, data, sizeof(data));
    } while (rc == VAULT_DEADLINE_EXCEEDED);
  } else {
    rc = vault_migrate(what, (int32_t)strlen(what));
    if (rc == VAULT_OK) ++moves;
  }
  printf("step %ld: %s -> %d (local %llu)\n", step, what, rc, (unsigned long long)local);
  return rc;
}

int main(void) {
  read_plan();
  for (long step = 0; step < STEPS; ++step) {
    uint64_t r = next();
    memory[r % MEMORY] ^= (uint8_t)(r >> 56);
    memory[(r >> 20) % MEMORY] += (uint8_t)step;
    for (int i = 0; i < plan_count; ++i) {
      if (plan_step[i] == step) act(plan_what[i], step, 3, r);
    }
    if (step % 50000 == 0) printf("progress %ld %016llx\n", step, (unsigned long long)r);
  }
  char result[64];
  int n = snprintf(result, sizeof(result), "%016llx", (unsigned long long)fnv());
  printf("done after %d moves: %s\n", moves, result);
  fflush(stdout);
  vault_exit(0, "", 0, result, n);
  return 1;
}
