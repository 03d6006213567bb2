/* fork + exec: the parent allocates, forks; the child optionally allocates (mode
 * "alloc") and then execs this program as "image"; the parent waits and allocates more.
 * Usage: fork_exec parent [alloc|noalloc] | fork_exec image
 * Prints "parent PID child PID" (parent). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void churn(int n, size_t size) {
  for (int i = 0; i < n; i++) {
    void *volatile p = malloc(size + (size_t)(i % 7));
    free(p);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "image") == 0) {
    churn(200, 5000);
    return 0;
  }
  int child_allocs = argc > 2 && strcmp(argv[2], "alloc") == 0;
  churn(100, 1000);
  void *volatile kept = malloc(1234); /* live across the fork: censored in the parent only */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (child_allocs) churn(50, 3000);
    execl(argv[0], argv[0], "image", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  churn(100, 2000);
  printf("parent %d child %d\n", (int)getpid(), (int)pid);
  (void)kept;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
