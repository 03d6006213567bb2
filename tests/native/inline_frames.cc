// Inline-frame fixture for tests/test_symbolize.py: always_inline functions (a plain
// one, a template, a member function that inlines another) inlined into noinline
// callers, each calling an opaque noinline allocator from inside the inlined body.
// The allocator records its return address, which main prints with the process's
// executable mappings, so the test symbolizes real return addresses through real
// (PIE) mappings.  Built with -O2, with and without -g.
#include <cstdio>
#include <cstdlib>

namespace inl {
void* g_returns[8];
int g_count;

__attribute__((noinline)) void* opaque_alloc(unsigned long n) {
  g_returns[g_count++] = __builtin_return_address(0);
  void* p = std::malloc(n);
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

__attribute__((always_inline)) inline void* make_buffer(unsigned long n) {
  void* p = opaque_alloc(n * 2 + 1);
  asm volatile("" : : : "memory");  // no tail call: the return address stays inlined
  return p;
}

template <class T>
__attribute__((always_inline)) inline T* make_array(unsigned long n) {
  T* p = static_cast<T*>(opaque_alloc(n * sizeof(T)));
  asm volatile("" : : : "memory");
  return p;
}

struct Pool {
  unsigned long base;
  __attribute__((always_inline)) inline void* grab(unsigned long n) {
    void* p = make_buffer(n + base);
    asm volatile("" : : : "memory");
    return p;
  }
};

__attribute__((noinline)) void* caller(unsigned long n) {
  void* p = make_buffer(n);
  asm volatile("" : : : "memory");
  return p;
}

__attribute__((noinline)) int* template_caller(unsigned long n) {
  int* p = make_array<int>(n);
  asm volatile("" : : : "memory");
  return p;
}

__attribute__((noinline)) void* nested_caller(unsigned long n) {
  Pool pool{3};
  void* p = pool.grab(n);
  asm volatile("" : : : "memory");
  return p;
}
}  // namespace inl

int main(int argc, char**) {
  std::free(inl::caller(argc));
  std::free(inl::template_caller(argc));
  std::free(inl::nested_caller(argc));
  static const char* const names[] = {"caller", "template_caller", "nested_caller"};
  for (int i = 0; i < inl::g_count; i++) std::printf("%s %p\n", names[i], inl::g_returns[i]);
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  char line[4096];
  while (std::fgets(line, sizeof line, maps)) std::printf("map %s", line);
  return 0;
}
