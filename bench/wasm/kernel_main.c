/* The kernel as a module of its own for wasm_bench: _start runs it for KERNEL_STEPS steps. Built
 * without a C library (-nostdlib), so that the time is the kernel's alone. */
#include "kernel.c"

__attribute__((export_name("_start"))) void _start(void) {
  volatile uint64_t sink = run(KERNEL_STEPS);
  (void)sink;
}
