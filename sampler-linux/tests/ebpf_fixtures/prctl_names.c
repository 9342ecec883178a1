// Names an anonymous mapping with prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME) once for each
// name on the command line, ignoring the result (kernels without CONFIG_ANON_VMA_NAME
// answer EINVAL, as they do to every writer), then prints "done" and waits for its
// standard input to close. The publication hook's test: only the name "OTEL_CTX" exactly
// may be reported.
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

int main(int argc, char **argv) {
  long page = sysconf(_SC_PAGESIZE);
  void *at = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (at == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  for (int i = 1; i < argc; i++)
    (void)prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)at, (unsigned long)page,
                (unsigned long)argv[i]);
  // Another option with the same argument: not a naming.
  (void)prctl(PR_SET_NAME, (unsigned long)"OTEL_CTX", 0, 0, 0);
  printf("done\n");
  fflush(stdout);
  char buf[16];
  while (read(0, buf, sizeof buf) > 0) {
  }
  return 0;
}
