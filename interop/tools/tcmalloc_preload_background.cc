// Part of libtcmalloc_google.so (interop/tools/tcmalloc_preload.sh): starts TCMalloc's
// background thread when the library is loaded.  Open-source TCMalloc leaves starting
// it to the program, and an unmodified program never does: its caches would then never
// be reclaimed, shuffled or resized and nothing released in the background, which is not
// TCMalloc as deployed.  TCMALLOC_PRELOAD_BACKGROUND=0 leaves it off;
// TCMALLOC_PRELOAD_RELEASE_RATE=BYTES_PER_S sets the constant release rate it applies
// (the open-source default is 0).
//
// fork(): the thread would make every program multi-threaded, and a child forked while
// it holds one of TCMalloc's locks (it takes pageheap_lock to release memory) deadlocks
// on its first malloc.  So its loop (background.cc, patched by the script to call
// tcmalloc_preload_background_busy/idle around each round) holds `busy` except while it
// sleeps, and fork takes `busy` first: the child never inherits a lock held by it.  The
// child runs without the thread (none may be started there).  A program's own threads
// forking while others allocate remain unsupported, as in TCMalloc itself.
#include <pthread.h>
#include <signal.h>

#include <cstdlib>

#include "tcmalloc/malloc_extension.h"

namespace {

pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;

void* Run(void*) {
  tcmalloc::MallocExtension::ProcessBackgroundActions();
  return nullptr;
}

void Prepare() { pthread_mutex_lock(&busy); }
void Parent() { pthread_mutex_unlock(&busy); }
void Child() { pthread_mutex_init(&busy, nullptr); }

__attribute__((constructor)) void StartBackgroundThread() {
  const char* off = std::getenv("TCMALLOC_PRELOAD_BACKGROUND");
  if (off != nullptr && off[0] == '0') return;
  if (const char* rate = std::getenv("TCMALLOC_PRELOAD_RELEASE_RATE")) {
    tcmalloc::MallocExtension::SetBackgroundReleaseRate(
        static_cast<tcmalloc::MallocExtension::BytesPerSecond>(std::strtoull(rate, nullptr, 10)));
  }
  if (pthread_atfork(Prepare, Parent, Child) != 0) return;
  // All signals blocked in the thread: the program's handlers run on its own threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t thread;
  if (pthread_create(&thread, nullptr, Run, nullptr) == 0) {
    pthread_setname_np(thread, "tcmalloc_bg");
    pthread_detach(thread);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

extern "C" void tcmalloc_preload_background_busy() { pthread_mutex_lock(&busy); }
extern "C" void tcmalloc_preload_background_idle() { pthread_mutex_unlock(&busy); }
