// Every operator new/delete form (plain, array, nothrow, sized, aligned up to 64 KiB)
// and standard containers churned on 2 threads; prints a checksum of what it wrote
// (the same under any allocator) and exits 0.  tests/test_tcmalloc_preload.py runs it
// under glibc and under an LD_PRELOADed allocator.
#include <cstdint>
#include <cstdio>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

static uint64_t forms() {
  uint64_t h = 14695981039346656037ull;
  for (size_t n = 1; n <= 100000; n = n * 3 + 1) {
    char* a = new char[n];
    a[n - 1] = 1;
    h = mix(h, n + static_cast<uint64_t>(a[n - 1]));
    delete[] a;
    int* p = new int(static_cast<int>(n));
    h = mix(h, static_cast<uint64_t>(*p));
    ::operator delete(p, sizeof(int));  // sized
    void* q = ::operator new(n, std::nothrow);
    if (q == nullptr) return 0;
    ::operator delete(q, std::nothrow);
    for (size_t align = 16; align <= 65536; align *= 4) {
      std::align_val_t al{align};
      void* r = ::operator new(n, al);
      void* s = ::operator new[](n, al, std::nothrow);
      if (reinterpret_cast<uintptr_t>(r) % align || reinterpret_cast<uintptr_t>(s) % align)
        return 0;
      h = mix(h, align);
      ::operator delete(r, n, al);
      ::operator delete[](s, al);
    }
  }
  return h;
}

static uint64_t churn(int seed) {
  std::map<int, std::string> m;
  std::vector<std::vector<int>> v;
  uint64_t h = 0;
  for (int i = 0; i < 200000; i++) {
    int k = (i * 7919 + seed) % 5000;
    if (i % 3 == 0) m.erase(k);
    else m[k] = std::string(static_cast<size_t>(k % 300 + 1), static_cast<char>('a' + k % 26));
    if (i % 1000 == 0) v.emplace_back(static_cast<size_t>(i % 9000 + 1), i);
  }
  for (auto& [k, s] : m) h = mix(h, static_cast<uint64_t>(k) + s.size());
  for (auto& x : v) h = mix(h, x.size());
  return h;
}

int main() {
  uint64_t a = 0, b = 0;
  std::thread t1([&] { a = churn(1); });
  std::thread t2([&] { b = churn(2); });
  t1.join();
  t2.join();
  uint64_t f = forms();
  std::printf("forms %016llx churn %016llx %016llx\n", static_cast<unsigned long long>(f),
              static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  return f == 0;
}
