/* lifetime run's launcher: lifetime_run_measured OUT PRELOAD CMD ARGS...
   Forks and execs CMD with LD_PRELOAD=PRELOAD (empty: unchanged), waits for it with
   wait4 and writes "pid=P status=S maxrss_kib=K" to OUT; exits with CMD's status
   (128+N if signal N ended it).  Why not from Python directly: a child exec'd from a
   fork or vfork of Python inherits Python's RSS high-water mark as its own ru_maxrss
   (the kernel records the old mm's peak at exec); forked from this small process, the
   command's peak is its own. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s OUT PRELOAD CMD ARGS...\n", argv[0]);
    return 2;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("lifetime run: fork");
    return 127;
  }
  if (pid == 0) {
    if (argv[2][0]) setenv("LD_PRELOAD", argv[2], 1);
    execvp(argv[3], argv + 3);
    fprintf(stderr, "lifetime run: %s: %s\n", argv[3], strerror(errno));
    _exit(127);
  }
  /* Ctrl-C and Ctrl-\ are the command's to handle (as system(3) does). */
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  int st;
  struct rusage ru;
  while (wait4(pid, &st, 0, &ru) < 0)
    if (errno != EINTR) { perror("lifetime run: wait4"); return 127; }
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  FILE* out = fopen(argv[1], "w");
  if (out) {
    fprintf(out, "pid=%d status=%d maxrss_kib=%ld\n", (int)pid, code, ru.ru_maxrss);
    fclose(out);
  }
  return code;
}
