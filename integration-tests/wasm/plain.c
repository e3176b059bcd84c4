/* A plain WASI program that knows nothing of vaults: it computes and prints as it goes, and its
 * last line is its answer. Its argument is how many steps (default 3000000); $LABEL, when set,
 * begins each line. An operator may move it while it runs (vaultctl migrate): its output is the
 * same as if it had never moved. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  const long steps = argc > 1 ? atol(argv[1]) : 3000000;
  const char* label = getenv("LABEL");
  if (label == NULL) label = "plain";
  printf("%s: %d args, %ld steps\n", label, argc, steps);
  uint64_t a = 0, b = 1;
  uint64_t sum = 0;
  for (long i = 0; i < steps; ++i) {
    uint64_t c = a + b;
    a = b;
    b = c;
    sum ^= c * (uint64_t)i;
    if (i % (steps / 8 + 1) == 0) printf("%s at %ld: %016llx\n", label, i, (unsigned long long)sum);
  }
  printf("%s answer %016llx\n", label, (unsigned long long)sum);
  return 0;
}
