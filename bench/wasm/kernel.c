/* The computation wasm_bench times in the interpreter and natively (the same source, compiled by
 * clang for wasm32 and by the host compiler into the bench): it stirs a 1 MiB table with a
 * generator and returns a checksum. `bench_yield` is a host import in wasm (called every 2^20
 * steps), so that Asyncify has a call to unwind at and instruments the loop. Valid C and C++. */
#include <stdint.h>

#ifdef __wasm__
__attribute__((import_module("env"), import_name("bench_yield"))) void bench_yield(void);
#define KERNEL_EXPORT __attribute__((export_name("run")))
#else
void bench_yield(void);
#define KERNEL_EXPORT
#endif

#define KERNEL_TABLE (1 << 20)
static uint8_t kernel_table[KERNEL_TABLE];

static uint64_t kernel_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

KERNEL_EXPORT uint64_t run(uint32_t steps) {
  uint64_t state = 0x9e3779b97f4a7c15ull, sum = 0;
  for (uint32_t i = 0; i < steps; ++i) {
    state += 0x9e3779b97f4a7c15ull;
    const uint64_t r = kernel_mix(state);
    kernel_table[r % KERNEL_TABLE] ^= (uint8_t)(r >> 56);
    sum += kernel_table[(r >> 20) % KERNEL_TABLE];
    if ((i & ((1u << 20) - 1)) == 0) bench_yield();
  }
  return sum;
}
