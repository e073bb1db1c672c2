// SPDX-License-Identifier: Apache-2.0
// no_uring_exec: runs a command with io_uring unavailable, as in a container
// whose seccomp profile forbids io_uring (Docker's default does):
// io_uring_setup(2) fails with ENOSYS through a seccomp filter inherited by
// the command and everything it starts.
//
// The fault-injection tests need it: libfiu intercepts libc calls, and
// io_uring submissions bypass libc, so a daemon that uses io_uring would
// never see an injected write error. Without io_uring the segment writer
// falls back to pwrite(2), which libfiu can fail.
//
//   no_uring_exec PROGRAM [ARGS...]
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define KVFS_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define KVFS_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "no_uring_exec: unknown architecture"
#endif

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, KVFS_AUDIT_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])),
                            filter};
  // Root may install a filter without no_new_privs (which would stop
  // fusermount3 from working for other users).
  if (geteuid() != 0 && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    perror("no_uring_exec: PR_SET_NO_NEW_PRIVS");
    return 127;
  }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    perror("no_uring_exec: PR_SET_SECCOMP");
    return 127;
  }
  execvp(argv[1], argv + 1);
  fprintf(stderr, "no_uring_exec: %s: %s\n", argv[1], strerror(errno));
  return 127;
}
