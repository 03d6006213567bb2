/* The end of a process image and the calls that change it: the final flush
 * (lt_finish: exit, return from main, _exit, _Exit, quick_exit, daemon's parent), exec
 * (a tentative end, undone if the exec fails), and effective-uid changes (the file is
 * given to the new uid).  The overview: sampler.h. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h> /* ST_NOSUID: statfs f_flags */
#ifndef ST_VALID
#define ST_VALID 0x0020 /* linux/statfs.h: f_flags is filled in */
#endif
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common.h"
#include "sampler.h"

/* ---------------- the end of a process image ---------------- */

/* Final flush: censored samples, mappings, trailer.  Afterwards every hook passes
 * straight through (state FINISHED), whatever other threads are still doing. */
void lt_finish(int reason) {
  struct lt_thread *t = &lt_tls;
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) != LT_ACTIVE) return;
  if (t->in_sampler) {
    /* exit from a signal handler that interrupted the sampler on this thread: its
     * locks may be ours, so stop without the final chunk rather than risk a deadlock */
    atomic_store(&lt_g.state, LT_FINISHED);
    return;
  }
  uint64_t saved = t->countdown;
  t->in_sampler = 1;
  t->countdown = 0;
  lt_lock_acquire(&lt_g.flush_lock);
  int expected = LT_ACTIVE;
  if (atomic_compare_exchange_strong(&lt_g.state, &expected, LT_FINISHING)) {
    t->countdown = saved;
    if (t->initialized && saved != UINT64_MAX) lt_sync_pending(t);
    lt_fold(t);
    t->countdown = 0;
    lt_flush(LT_FLUSH_FINAL, reason);
    atomic_store(&lt_g.state, LT_FINISHED);
    lt_unwind_report();
  }
  lt_lock_release(&lt_g.flush_lock);
  t->in_sampler = 0;
  t->countdown = t->seg = UINT64_MAX;
}

void lt_thread_exit_fold(void *v) {
  (void)v;
  struct lt_thread *t = &lt_tls;
  if (t->initialized && t->countdown != UINT64_MAX) lt_sync_pending(t);
  lt_fold(t);
  lt_unwind_memo_end(t);
}

#ifndef LT_HARNESS
static int (*real_execve)(const char *, char *const[], char *const[]);
static int (*real_execvpe)(const char *, char *const[], char *const[]);
static int (*real_fexecve)(int, char *const[], char *const[]);
static int (*real_execveat)(int, const char *, char *const[], char *const[], int);
static int (*real_setuid)(uid_t);
static int (*real_seteuid)(uid_t);
static int (*real_setreuid)(uid_t, uid_t);
static int (*real_setresuid)(uid_t, uid_t, uid_t);

#define RESOLVE(var, name) \
  do { if (!var) var = (__typeof__(var))dlsym(RTLD_NEXT, name); } while (0)

void lt_resolve_exec(void) {
  RESOLVE(real_execve, "execve");
  RESOLVE(real_execvpe, "execvpe");
  RESOLVE(real_fexecve, "fexecve");
  RESOLVE(real_execveat, "execveat");
  RESOLVE(real_setuid, "setuid");
  RESOLVE(real_seteuid, "seteuid");
  RESOLVE(real_setreuid, "setreuid");
  RESOLVE(real_setresuid, "setresuid");
}

/* ---- programs the loader will not preload us into ----
 * Looked at before an exec (open, pread, fstat: no malloc) so that the exec'ing
 * image's trailer can say which program went unprofiled (Trailer.unprofiled_exec;
 * `lifetime profile` reports it after the run).  Nothing is printed: the host's
 * output stays its own. */
static const char *elf_problem(int fd, int depth);

static const char *file_problem(int dirfd, const char *path, int flags, int depth) {
  struct stat st;
  if (fstatat(dirfd, path, &st, flags) != 0 || !S_ISREG(st.st_mode)) return NULL;
  int fd = lt_openat_high(dirfd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
  if (fd < 0) return NULL;
  const char *why = elf_problem(fd, depth);
  close(fd);
  return why;
}

static const char *elf_problem(int fd, int depth) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
  struct statfs sf;
  int nosuid = fstatfs(fd, &sf) == 0 && (sf.f_flags & ST_VALID) && (sf.f_flags & ST_NOSUID);
  if (!nosuid) {
    /* secure-execution mode (AT_SECURE): the new effective ids differ from the real
     * ones; the loader then ignores an LD_PRELOAD path with a slash */
    uid_t ruid = getuid(), euid = (st.st_mode & S_ISUID) ? st.st_uid : geteuid();
    gid_t rgid = getgid(),
          egid = (st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) ? st.st_gid : getegid();
    if (euid != ruid || egid != rgid)
      return (st.st_mode & (S_ISUID | S_ISGID)) ? "setuid/setgid program (the loader ignores "
                                                  "LD_PRELOAD in secure-execution mode)"
                                                : "runs with changed ids (the loader ignores "
                                                  "LD_PRELOAD in secure-execution mode)";
    if (ruid != 0 && fgetxattr(fd, "security.capability", NULL, 0) > 0)
      return "has file capabilities (the loader ignores LD_PRELOAD in secure-execution mode)";
  }
  unsigned char head[256];
  ssize_t n = pread(fd, head, sizeof head - 1, 0);
  if (n < 4) return NULL;
  if (head[0] == '#' && head[1] == '!') {
    if (depth > 0) return NULL;
    head[n] = 0;
    char interp[256];
    size_t i = 2, k = 0;
    while (head[i] == ' ' || head[i] == '\t') i++;
    while (head[i] && head[i] != ' ' && head[i] != '\t' && head[i] != '\n' && k < sizeof interp - 1)
      interp[k++] = (char)head[i++];
    interp[k] = 0;
    if (!k) return NULL;
    const char *why = file_problem(AT_FDCWD, interp, 0, 1);
    return why ? "its #! interpreter cannot be preloaded into (statically linked, setuid or "
                 "with file capabilities)"
               : NULL;
  }
  if (memcmp(head, ELFMAG, SELFMAG) != 0 || (size_t)n < sizeof(Elf64_Ehdr)) return NULL;
  if (head[EI_CLASS] != ELFCLASS64) return "32-bit program (the sampler is a 64-bit library)";
  Elf64_Ehdr eh;
  memcpy(&eh, head, sizeof eh);
  if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) return NULL;
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 64) return NULL;
  Elf64_Phdr ph[64];
  size_t bytes = (size_t)eh.e_phnum * sizeof(Elf64_Phdr);
  if (pread(fd, ph, bytes, (off_t)eh.e_phoff) != (ssize_t)bytes) return NULL;
  int dynamic = 0;
  for (int i = 0; i < eh.e_phnum; i++) {
    if (ph[i].p_type == PT_INTERP) return NULL; /* the dynamic loader runs: preloadable */
    if (ph[i].p_type == PT_DYNAMIC) dynamic = 1;
  }
  if (eh.e_type == ET_DYN && dynamic) return NULL; /* a shared object (ld.so run directly) */
  return "statically linked (no PT_INTERP: nothing loads LD_PRELOAD)";
}

/* execvp's search: the first PATH entry with an executable regular file. */
static const char *search_problem(const char *file, char *found, size_t cap) {
  if (strchr(file, '/')) {
    lt_strlcpy(found, file, cap);
    return file_problem(AT_FDCWD, file, 0, 0);
  }
  const char *path = getenv("PATH");
  if (!path) path = "/bin:/usr/bin";
  size_t flen = strlen(file);
  for (const char *p = path;; p++) {
    const char *end = strchr(p, ':');
    size_t dlen = end ? (size_t)(end - p) : strlen(p);
    if (dlen + flen + 2 < cap) {
      size_t n = 0;
      if (dlen == 0) found[n++] = '.';
      memcpy(found + n, p, dlen);
      n += dlen;
      found[n++] = '/';
      memcpy(found + n, file, flen + 1);
      struct stat st;
      if (access(found, X_OK) == 0 && stat(found, &st) == 0 && S_ISREG(st.st_mode))
        return file_problem(AT_FDCWD, found, 0, 0);
    }
    if (!end) break;
    p = end;
  }
  found[0] = 0;
  return NULL;
}

/* ---- exec ----
 * exec replaces the image: its file gets its end (censored samples, trailer
 * END_EXEC) first.  That end is tentative: flush_lock stays held across the exec
 * call (other threads' flushes skip, an exit or fork waits), and if the exec fails
 * -- a shell tries execve on each PATH entry -- the file is truncated back to where
 * the end began and the profile goes on, nothing lost or written twice: completed
 * samples were committed before the end (LT_FLUSH_COMMIT), the censored ones are
 * still live, and stacks first named in the end are named again (mark_gen).  A
 * vfork child (or a raw clone) shares our memory but has another pid: it must not
 * touch the parent's profile, so it execs without flushing.  posix_spawn needs no
 * hook: its child runs only glibc-internal code before exec, and the new image
 * profiles itself. */
struct exec_undo {
  int held, header_written;
  uint64_t offset, samples, censored, chunk_dropped, countdown;
};

enum { EXEC_PATH, EXEC_SEARCH, EXEC_FD, EXEC_AT };

/* Not analyzed: flush_lock stays held across the exec when u->held says so (released by
 * after_failed_exec, or by the exec itself), which the analysis cannot follow. */
static void before_exec(struct exec_undo *u, int how, int dirfd, const char *path, int flags)
    NO_THREAD_SAFETY_ANALYSIS {
  struct lt_thread *t = &lt_tls;
  u->held = 0;
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) != LT_ACTIVE || t->in_sampler)
    return;
  if (lt_getpid() != lt_g.pid) return;
  int e = errno;
  u->countdown = t->countdown;
  t->in_sampler = 1;
  t->countdown = 0;
  lt_lock_acquire(&lt_g.flush_lock);
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) != LT_ACTIVE) {
    lt_lock_release(&lt_g.flush_lock);
    t->countdown = u->countdown;
    t->in_sampler = 0;
    errno = e;
    return;
  }
  t->countdown = u->countdown;
  if (t->initialized && t->countdown != UINT64_MAX) lt_sync_pending(t);
  lt_fold(t);
  t->countdown = 0;
  lt_flush(LT_FLUSH_COMMIT, 0);
  u->offset = lt_g.file_bytes;
  u->samples = lt_g.samples_written;
  u->censored = lt_g.censored_written;
  u->chunk_dropped = lt_g.chunk_dropped;
  u->header_written = lt_g.header_written; /* 0 only if the commit's chunk was dropped */
  const char *why = NULL;
  char *note = lt_g.exec_note_path;
  size_t cap = sizeof lt_g.exec_note_path;
  if (how == EXEC_SEARCH) {
    why = search_problem(path, note, cap);
  } else if (how == EXEC_FD) {
    char link[32], num[24];
    size_t n = lt_strlcpy(link, "/proc/self/fd/", sizeof link);
    lt_strlcpy(link + n, lt_utoa((uint64_t)(unsigned)dirfd, num), sizeof link - n);
    ssize_t len = readlink(link, note, cap - 1);
    note[len > 0 ? len : 0] = 0;
    why = elf_problem(dirfd, 0);
  } else {
    lt_strlcpy(note, path, cap);
    int empty = how == EXEC_AT && (flags & AT_EMPTY_PATH) && !path[0];
    why = empty ? elf_problem(dirfd, 0)
                : file_problem(how == EXEC_AT ? dirfd : AT_FDCWD, path,
                               how == EXEC_AT ? (flags & AT_SYMLINK_NOFOLLOW) : 0, 0);
  }
  lt_g.exec_note_reason = why;
  lt_g.mark_gen = ++lt_g.gen_seq;
  lt_flush(LT_FLUSH_TENTATIVE, LT_END_EXEC);
  lt_g.mark_gen = lt_g.file_gen;
  u->held = 1; /* flush_lock and in_sampler stay until the exec returns */
  errno = e;
}

static void after_failed_exec(struct exec_undo *u) NO_THREAD_SAFETY_ANALYSIS { /* see before_exec */
  if (!u->held) return;
  struct lt_thread *t = &lt_tls;
  int e = errno;
  if (lt_g.file_bytes != u->offset && !lt_g.file_failed) {
    if (truncate(lt_g.path, (off_t)u->offset) == 0) {
      lt_g.file_bytes = u->offset;
    } else {
      lt_g.file_failed = 1; /* a trailer mid-file would make it unreadable: stop */
      lt_log("cannot truncate ", lt_g.path, " after a failed exec; no more samples are written");
    }
  }
  lt_g.samples_written = u->samples;
  lt_g.censored_written = u->censored;
  /* the censored samples of a dropped chunk of the end are still live: not dropped */
  atomic_fetch_sub_explicit(&lt_g.dropped_samples, lt_g.chunk_dropped - u->chunk_dropped,
                            memory_order_relaxed);
  lt_g.chunk_dropped = u->chunk_dropped;
  lt_g.header_written = u->header_written; /* a header in the end was truncated with it */
  lt_g.exec_note_reason = NULL;
  lt_lock_release(&lt_g.flush_lock);
  t->countdown = u->countdown;
  t->in_sampler = 0;
  errno = e;
}

LT_EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
  lt_resolve_exec();
  struct exec_undo u;
  before_exec(&u, EXEC_PATH, AT_FDCWD, path, 0);
  int r = real_execve(path, argv, envp);
  after_failed_exec(&u);
  return r;
}
LT_EXPORT int execv(const char *path, char *const argv[]) {
  return execve(path, argv, environ);
}
LT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
  lt_resolve_exec();
  struct exec_undo u;
  before_exec(&u, EXEC_SEARCH, AT_FDCWD, file, 0);
  int r = real_execvpe(file, argv, envp);
  after_failed_exec(&u);
  return r;
}
LT_EXPORT int execvp(const char *file, char *const argv[]) {
  return execvpe(file, argv, environ);
}
LT_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
  lt_resolve_exec();
  struct exec_undo u;
  before_exec(&u, EXEC_FD, fd, "", 0);
  int r = real_fexecve(fd, argv, envp);
  after_failed_exec(&u);
  return r;
}
LT_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
                       int flags) {
  lt_resolve_exec();
  struct exec_undo u;
  before_exec(&u, EXEC_AT, dirfd, path, flags);
  int r = real_execveat(dirfd, path, argv, envp, flags);
  after_failed_exec(&u);
  return r;
}

/* execl, execlp, execle: collect the variadic arguments, as glibc does. */
#define COLLECT_ARGS(arg0, ap, argv, envp_out, with_env)                      \
  size_t argc_ = 1;                                                          \
  {                                                                          \
    va_list cnt;                                                             \
    va_copy(cnt, ap);                                                        \
    while (va_arg(cnt, const char *)) argc_++;                               \
    va_end(cnt);                                                             \
  }                                                                          \
  if (argc_ >= INT_MAX / sizeof(char *) - 1) {                               \
    errno = E2BIG;                                                           \
    return -1;                                                               \
  }                                                                          \
  const char *argv[argc_ + 1];                                               \
  argv[0] = arg0;                                                            \
  for (size_t i_ = 1; i_ <= argc_; i_++) argv[i_] = va_arg(ap, const char *); \
  if (with_env) envp_out = va_arg(ap, char *const *);

LT_EXPORT int execl(const char *path, const char *arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char *const *envp = environ;
  COLLECT_ARGS(arg, ap, argv, envp, 0);
  va_end(ap);
  return execve(path, (char *const *)argv, envp);
}
LT_EXPORT int execle(const char *path, const char *arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char *const *envp = NULL;
  COLLECT_ARGS(arg, ap, argv, envp, 1);
  va_end(ap);
  return execve(path, (char *const *)argv, envp);
}
LT_EXPORT int execlp(const char *file, const char *arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char *const *envp = environ;
  COLLECT_ARGS(arg, ap, argv, envp, 0);
  va_end(ap);
  return execvpe(file, (char *const *)argv, envp);
}

/* _exit/_Exit skip atexit handlers and destructors: flush here (END_IMMEDIATE_EXIT),
 * unless we are a vfork child sharing the parent's memory. */
static __attribute__((noreturn)) void exit_now(int status) {
  for (;;) {
    syscall(SYS_exit_group, status);
    syscall(SYS_exit, status);
  }
}
static __attribute__((noreturn)) void immediate_exit(int status) {
  if (lt_getpid() == lt_g.pid) lt_finish(LT_END_IMMEDIATE_EXIT);
  exit_now(status);
}
LT_EXPORT void _exit(int status) { immediate_exit(status); }
LT_EXPORT void _Exit(int status) { immediate_exit(status); }

/* quick_exit runs the at_quick_exit handlers and then glibc's internal _exit, which
 * no hook sees.  This handler is registered at start-up, before any of the host's,
 * so it runs after all of them. */
void lt_quick_exit_finish(void) {
  if (lt_getpid() == lt_g.pid) lt_finish(LT_END_IMMEDIATE_EXIT);
}

/* daemon(): glibc's calls its internal fork and _exit, so the parent's profile would
 * never be finished.  The same function, as glibc 2.36's misc/daemon.c, with the
 * parent leaving through our _exit. */
static void close_keep_errno(int fd) {
  int e = errno;
  syscall(SYS_close, fd);
  errno = e;
}

LT_EXPORT int daemon(int nochdir, int noclose) {
  switch (fork()) {
    case -1: return -1;
    case 0: break;
    default: immediate_exit(0);
  }
  if (setsid() == -1) return -1;
  if (!nochdir) (void)chdir("/");
  if (!noclose) {
    struct stat st;
    int fd = open("/dev/null", O_RDWR, 0);
    if (fd != -1 && fstat(fd, &st) == 0) {
      if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3)) {
        (void)dup2(fd, STDIN_FILENO);
        (void)dup2(fd, STDOUT_FILENO);
        (void)dup2(fd, STDERR_FILENO);
        if (fd > 2) (void)close(fd);
      } else {
        close_keep_errno(fd);
        errno = ENODEV; /* no call failed: glibc sets one */
        return -1;
      }
    } else {
      close_keep_errno(fd);
      return -1;
    }
  }
  return 0;
}

/* ---- effective uid changes ----
 * The file is created by the image's first flush with the ids of that moment, and
 * reopened by path at every flush.  A root process that drops to another uid
 * (setpriv, servers) could then no longer append to it: before the change, commit
 * the file (create it if needed) and give it to the new uid. */
static void before_uid_change(uid_t new_euid) {
  struct lt_thread *t = &lt_tls;
  if (new_euid == (uid_t)-1 || new_euid == 0 || t->in_sampler) return;
  if (atomic_load_explicit(&lt_g.state, memory_order_acquire) != LT_ACTIVE) return;
  int e = errno;
  if (geteuid() == 0 && lt_getpid() == lt_g.pid) {
    uint64_t saved = t->countdown;
    t->in_sampler = 1;
    t->countdown = 0;
    lt_lock_acquire(&lt_g.flush_lock);
    if (atomic_load_explicit(&lt_g.state, memory_order_acquire) == LT_ACTIVE) {
      lt_flush(LT_FLUSH_COMMIT, 0);
      if (!lt_g.file_failed) (void)chown(lt_g.path, new_euid, (gid_t)-1);
    }
    lt_lock_release(&lt_g.flush_lock);
    t->countdown = saved;
    t->in_sampler = 0;
  }
  errno = e;
}

LT_EXPORT int setuid(uid_t uid) {
  lt_resolve_exec();
  before_uid_change(uid);
  return real_setuid(uid);
}
LT_EXPORT int seteuid(uid_t euid) {
  lt_resolve_exec();
  before_uid_change(euid);
  return real_seteuid(euid);
}
LT_EXPORT int setreuid(uid_t ruid, uid_t euid) {
  lt_resolve_exec();
  before_uid_change(euid);
  return real_setreuid(ruid, euid);
}
LT_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  lt_resolve_exec();
  before_uid_change(euid);
  return real_setresuid(ruid, euid, suid);
}
#endif
