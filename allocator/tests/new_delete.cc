// Every operator new / delete form: plain, array, nothrow, aligned (up to 64 KiB),
// sized delete; bad_alloc and nothrow failure, the program's new_handler first (one that
// returns, one that throws); STL
// containers churned by 4 threads.
#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

#define DIE(msg) do { std::fprintf(stderr, "%s\n", msg); std::exit(1); } while (0)

struct alignas(64) Line { char b[64]; };
struct alignas(65536) Big { char b[100]; };

static int g_handler_calls = 0;
static void handler_once() {
  ++g_handler_calls;
  std::set_new_handler(nullptr);
}
// A handler may also throw bad_alloc itself: the throwing forms pass it on, the nothrow
// forms return null.
static void handler_throws() {
  ++g_handler_calls;
  throw std::bad_alloc();
}

template <class T> void aligned_ok(T* p) { if (reinterpret_cast<uintptr_t>(p) % alignof(T)) DIE("misaligned new"); }

int main() {
  for (int r = 0; r < 200; ++r) {
    int* a = new int(5);
    int* b = new int[100];
    int* c = new (std::nothrow) int;
    int* d = new (std::nothrow) int[7];
    Line* l = new Line;
    Line* la = new Line[9];
    Big* g = new Big;
    Big* ga = new Big[3];
    aligned_ok(l); aligned_ok(la); aligned_ok(g); aligned_ok(ga);
    for (size_t al = 16; al <= 65536; al <<= 1) {
      void* p = ::operator new(al + 3, std::align_val_t(al));
      if (reinterpret_cast<uintptr_t>(p) % al) DIE("operator new(align) misaligned");
      ::operator delete(p, al + 3, std::align_val_t(al));
      p = ::operator new[](al, std::align_val_t(al), std::nothrow);
      if (!p || reinterpret_cast<uintptr_t>(p) % al) DIE("operator new[](align, nothrow)");
      ::operator delete[](p, std::align_val_t(al), std::nothrow);
      p = ::operator new(al, std::align_val_t(al), std::nothrow);
      ::operator delete(p, std::align_val_t(al));
      p = ::operator new[](al, std::align_val_t(al));
      ::operator delete[](p, al, std::align_val_t(al));
    }
    void* s = ::operator new(100);
    ::operator delete(s, 100);
    s = ::operator new[](100);
    ::operator delete[](s, 100);
    s = ::operator new(10, std::nothrow);
    ::operator delete(s, std::nothrow);
    s = ::operator new[](10, std::nothrow);
    ::operator delete[](s, std::nothrow);
    delete a; delete[] b; delete c; delete[] d; delete l; delete[] la; delete g; delete[] ga;
  }
  bool threw = false;
  try {
    void* p = ::operator new(SIZE_MAX / 2);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  if (!threw) DIE("operator new(huge) did not throw");
  if (::operator new(SIZE_MAX / 2, std::nothrow)) DIE("nothrow new(huge) returned memory");
  // The program's new_handler is called before bad_alloc, by the throwing and the nothrow
  // forms alike (once each here: it takes itself out).
  std::set_new_handler(handler_once);
  threw = false;
  try {
    ::operator delete(::operator new(SIZE_MAX / 2));
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  if (!threw || g_handler_calls != 1) DIE("operator new(huge) did not call the new_handler once, then throw");
  std::set_new_handler(handler_once);
  if (::operator new(SIZE_MAX / 2, std::nothrow) || g_handler_calls != 2)
    DIE("nothrow new(huge) did not call the new_handler once, then return null");
  std::set_new_handler(handler_throws);
  threw = false;
  try {
    ::operator delete[](::operator new[](SIZE_MAX / 2, std::align_val_t(64)));
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  if (!threw || g_handler_calls != 3) DIE("a new_handler's bad_alloc did not reach the program's catch");
  if (::operator new(SIZE_MAX / 2, std::nothrow) || g_handler_calls != 4)
    DIE("nothrow new(huge) with a throwing new_handler did not return null");
  if (::operator new[](SIZE_MAX / 2, std::align_val_t(4096), std::nothrow) || g_handler_calls != 5)
    DIE("aligned nothrow new[](huge) with a throwing new_handler did not return null");
  std::set_new_handler(nullptr);
  if (::operator new(SIZE_MAX / 2, std::align_val_t(4096), std::nothrow))
    DIE("aligned nothrow new(huge) returned memory");
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([t] {
      std::map<int, std::string> m;
      std::vector<std::vector<int>> vs;
      for (int i = 0; i < 20000; ++i) {
        m[(i * 7919 + t) % 5000] = std::string(size_t(i % 300), char('a' + i % 26));
        vs.emplace_back(size_t(i % 100), i);
        if (vs.size() > 500) vs.erase(vs.begin(), vs.begin() + 250);
      }
      for (auto& [k, v] : m) if (!v.empty() && v[0] != v.back()) DIE("string corrupted");
    });
  for (auto& t : ts) t.join();
  std::puts("ok");
  return 0;
}
