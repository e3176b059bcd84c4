/* A plain WASI program that knows nothing of vaults: it computes and prints as it goes, and its
 * last line is its answer. An operator may move it while it runs (vaultctl migrate); its output
 * is the same as if it had never moved. */
#include <stdint.h>
#include <stdio.h>

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  uint64_t a = 0, b = 1;
  uint64_t sum = 0;
  for (long i = 0; i < 3000000; ++i) {
    uint64_t c = a + b;
    a = b;
    b = c;
    sum ^= c * (uint64_t)i;
    if (i % 500000 == 0) printf("at %ld: %016llx\n", i, (unsigned long long)sum);
  }
  printf("answer %016llx\n", (unsigned long long)sum);
  return 0;
}
