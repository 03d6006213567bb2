/* A host with closed standard descriptors (run as sh -c 'exec >&-; exec closed_fds
 * REPORT MS'): a thread writes "HOST-TEXT" to every one of 0..2 that was closed at
 * start, as fast as it can, while the main thread allocates for MS milliseconds so the
 * sampler samples and flushes all along (small LIFETIME_INTERVAL_BYTES,
 * LIFETIME_FLUSH_MS=1).  Without the sampler every such write fails with EBADF.
 * Writes to REPORT (opened at the end): "closed C writes W ok K ebadf E other O" and
 * "fds_same S" (1 if the descriptors open below 1100 are the same after as before). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FD_SCAN 1100

static int closed[3], nclosed;
static atomic_int done;
static long writes, ok, ebadf, other;

static void *writer(void *arg) {
  (void)arg;
  static const char text[] = "HOST-TEXT\n";
  while (!atomic_load(&done)) {
    for (int i = 0; i < nclosed; i++) {
      ssize_t r = write(closed[i], text, sizeof text - 1);
      writes++;
      if (r >= 0) ok++;
      else if (errno == EBADF) ebadf++;
      else other++;
    }
  }
  return NULL;
}

static void open_fds(unsigned char *open_now) {
  for (int fd = 0; fd < FD_SCAN; fd++) open_now[fd] = fcntl(fd, F_GETFD) >= 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  double ms = atof(argv[2]);
  static unsigned char before[FD_SCAN], after[FD_SCAN];
  open_fds(before);
  for (int fd = 0; fd < 3; fd++)
    if (!before[fd]) closed[nclosed++] = fd;
  pthread_t th;
  if (pthread_create(&th, NULL, writer, NULL) != 0) return 3;
  void *keep[64] = {0};
  double end = now_ms() + ms;
  for (unsigned i = 0; now_ms() < end; i++) {
    for (int k = 0; k < 256; k++) {
      unsigned slot = (i * 256 + (unsigned)k) % 64;
      free(keep[slot]);
      keep[slot] = malloc(64 + (size_t)(k * 37 % 2000));
    }
  }
  atomic_store(&done, 1);
  pthread_join(th, NULL);
  open_fds(after);
  int same = memcmp(before, after, sizeof before) == 0;
  for (int i = 0; i < 64; i++) free(keep[i]);
  FILE *f = fopen(argv[1], "w");
  if (!f) return 4;
  fprintf(f, "closed %d writes %ld ok %ld ebadf %ld other %ld\nfds_same %d\n", nclosed, writes,
          ok, ebadf, other, same);
  fclose(f);
  return 0;
}
