/* bpf: tries to create a BPF map and load a BPF program.
 *
 * Prints "bpf BPF_MAP_CREATE: <ERRNO>", "bpf BPF_PROG_LOAD socket filter: <ERRNO>"; "ESCAPED"
 * on success. */
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 8;
  attr.max_entries = 1;
  long fd = syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
  expect_failure("bpf BPF_MAP_CREATE", fd);
  if (fd >= 0) close((int)fd);

  struct bpf_insn program[] = {
      {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
      {.code = BPF_JMP | BPF_EXIT},
  };
  memset(&attr, 0, sizeof attr);
  attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  attr.insns = (unsigned long)program;
  attr.insn_cnt = sizeof program / sizeof program[0];
  attr.license = (unsigned long)"GPL";
  fd = syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr);
  expect_failure("bpf BPF_PROG_LOAD socket filter", fd);
  if (fd >= 0) close((int)fd);
  return 0;
}
