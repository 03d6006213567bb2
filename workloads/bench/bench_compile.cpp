// Benchmark input for benchmarks/profiler_overhead.py: a self-contained, template- and
// STL-heavy translation unit that clang-14 compiles (-O2 -c) in a few seconds, so the
// compiler does a realistic amount of allocation (AST, templates, IR, codegen).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <iomanip>
#include <iostream>
#include <list>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

namespace bench {

// ---------------------------------------------------------------- expression templates
template <typename E>
struct Expr {
  const E& self() const { return static_cast<const E&>(*this); }
  double operator[](std::size_t i) const { return self()[i]; }
  std::size_t size() const { return self().size(); }
};

class Vec : public Expr<Vec> {
 public:
  explicit Vec(std::size_t n, double v = 0.0) : data_(n, v) {}
  template <typename E>
  Vec(const Expr<E>& e) : data_(e.size()) {
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = e[i];
  }
  double operator[](std::size_t i) const { return data_[i]; }
  double& operator[](std::size_t i) { return data_[i]; }
  std::size_t size() const { return data_.size(); }

 private:
  std::vector<double> data_;
};

template <typename L, typename R, typename Op>
class Binary : public Expr<Binary<L, R, Op>> {
 public:
  Binary(const L& l, const R& r) : l_(l), r_(r) {}
  double operator[](std::size_t i) const { return Op::apply(l_[i], r_[i]); }
  std::size_t size() const { return l_.size(); }

 private:
  const L& l_;
  const R& r_;
};

struct Add { static double apply(double a, double b) { return a + b; } };
struct Mul { static double apply(double a, double b) { return a * b; } };
struct Sub { static double apply(double a, double b) { return a - b; } };

template <typename L, typename R>
Binary<L, R, Add> operator+(const Expr<L>& l, const Expr<R>& r) {
  return Binary<L, R, Add>(l.self(), r.self());
}
template <typename L, typename R>
Binary<L, R, Mul> operator*(const Expr<L>& l, const Expr<R>& r) {
  return Binary<L, R, Mul>(l.self(), r.self());
}
template <typename L, typename R>
Binary<L, R, Sub> operator-(const Expr<L>& l, const Expr<R>& r) {
  return Binary<L, R, Sub>(l.self(), r.self());
}

// ---------------------------------------------------------------- compile-time lists
template <typename... Ts> struct TypeList {};
template <typename List> struct Length;
template <typename... Ts> struct Length<TypeList<Ts...>> : std::integral_constant<std::size_t, sizeof...(Ts)> {};
template <typename T, typename List> struct Prepend;
template <typename T, typename... Ts> struct Prepend<T, TypeList<Ts...>> { using type = TypeList<T, Ts...>; };
template <template <typename> class F, typename List> struct Map;
template <template <typename> class F, typename... Ts> struct Map<F, TypeList<Ts...>> {
  using type = TypeList<typename F<Ts>::type...>;
};
template <typename T> struct AddPtr { using type = T*; };
template <std::size_t N> struct Fib : std::integral_constant<std::uint64_t, Fib<N - 1>::value + Fib<N - 2>::value> {};
template <> struct Fib<0> : std::integral_constant<std::uint64_t, 0> {};
template <> struct Fib<1> : std::integral_constant<std::uint64_t, 1> {};

template <std::size_t... Is>
constexpr std::array<std::uint64_t, sizeof...(Is)> fib_table(std::index_sequence<Is...>) {
  return {Fib<Is>::value...};
}
constexpr auto kFib = fib_table(std::make_index_sequence<64>{});

// ---------------------------------------------------------------- a tiny JSON-ish value
struct Value;
using Object = std::map<std::string, std::shared_ptr<Value>>;
using Array = std::vector<std::shared_ptr<Value>>;
struct Value {
  std::variant<std::nullptr_t, bool, double, std::string, Array, Object> v;
};

std::string render(const Value& value);

struct Renderer {
  std::ostringstream& out;
  void operator()(std::nullptr_t) const { out << "null"; }
  void operator()(bool b) const { out << (b ? "true" : "false"); }
  void operator()(double d) const { out << std::setprecision(12) << d; }
  void operator()(const std::string& s) const { out << '"' << s << '"'; }
  void operator()(const Array& a) const {
    out << '[';
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (i) out << ',';
      out << render(*a[i]);
    }
    out << ']';
  }
  void operator()(const Object& o) const {
    out << '{';
    bool first = true;
    for (const auto& [k, v] : o) {
      if (!first) out << ',';
      first = false;
      out << '"' << k << "\":" << render(*v);
    }
    out << '}';
  }
};

std::string render(const Value& value) {
  std::ostringstream out;
  std::visit(Renderer{out}, value.v);
  return out.str();
}

std::shared_ptr<Value> make_tree(int depth, std::mt19937& rng) {
  auto node = std::make_shared<Value>();
  if (depth == 0) {
    switch (rng() % 4) {
      case 0: node->v = nullptr; break;
      case 1: node->v = bool(rng() % 2); break;
      case 2: node->v = double(rng() % 1000) / 7.0; break;
      default: node->v = std::string(rng() % 10 + 1, char('a' + rng() % 26)); break;
    }
    return node;
  }
  if (rng() % 2) {
    Array a;
    for (int i = 0; i < 3; ++i) a.push_back(make_tree(depth - 1, rng));
    node->v = std::move(a);
  } else {
    Object o;
    for (int i = 0; i < 3; ++i) o["k" + std::to_string(i)] = make_tree(depth - 1, rng);
    node->v = std::move(o);
  }
  return node;
}

// ---------------------------------------------------------------- graph algorithms
template <typename Weight>
class Graph {
 public:
  explicit Graph(std::size_t n) : adj_(n) {}
  void add_edge(std::size_t a, std::size_t b, Weight w) {
    adj_[a].emplace_back(b, w);
    adj_[b].emplace_back(a, w);
  }
  std::vector<Weight> dijkstra(std::size_t src) const {
    std::vector<Weight> dist(adj_.size(), std::numeric_limits<Weight>::max());
    using Item = std::pair<Weight, std::size_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> pq;
    dist[src] = Weight{};
    pq.emplace(Weight{}, src);
    while (!pq.empty()) {
      auto [d, u] = pq.top();
      pq.pop();
      if (d > dist[u]) continue;
      for (const auto& [v, w] : adj_[u]) {
        if (dist[u] + w < dist[v]) {
          dist[v] = dist[u] + w;
          pq.emplace(dist[v], v);
        }
      }
    }
    return dist;
  }
  std::vector<std::size_t> bfs_order(std::size_t src) const {
    std::vector<bool> seen(adj_.size());
    std::deque<std::size_t> q{src};
    std::vector<std::size_t> order;
    seen[src] = true;
    while (!q.empty()) {
      auto u = q.front();
      q.pop_front();
      order.push_back(u);
      for (const auto& e : adj_[u])
        if (!seen[e.first]) {
          seen[e.first] = true;
          q.push_back(e.first);
        }
    }
    return order;
  }
  std::size_t components() const {
    std::vector<std::size_t> parent(adj_.size());
    std::iota(parent.begin(), parent.end(), 0);
    std::function<std::size_t(std::size_t)> find = [&](std::size_t x) {
      return parent[x] == x ? x : parent[x] = find(parent[x]);
    };
    for (std::size_t u = 0; u < adj_.size(); ++u)
      for (const auto& e : adj_[u]) parent[find(u)] = find(e.first);
    std::set<std::size_t> roots;
    for (std::size_t u = 0; u < adj_.size(); ++u) roots.insert(find(u));
    return roots.size();
  }

 private:
  std::vector<std::vector<std::pair<std::size_t, Weight>>> adj_;
};

// ---------------------------------------------------------------- text processing
struct WordStats {
  std::unordered_map<std::string, std::size_t> counts;
  std::map<std::size_t, std::vector<std::string>> by_length;
  std::multiset<std::string> sorted;
};

WordStats analyze(const std::string& text) {
  WordStats stats;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && !std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::size_t j = i;
    while (j < text.size() && std::isalpha(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i) break;
    std::string w = text.substr(i, j - i);
    i = j;
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return std::tolower(c); });
    ++stats.counts[w];
    stats.by_length[w.size()].push_back(w);
    stats.sorted.insert(w);
  }
  return stats;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

// ---------------------------------------------------------------- generic containers
template <typename K, typename V, std::size_t Buckets = 64>
class LruCache {
 public:
  explicit LruCache(std::size_t cap) : cap_(cap) {}
  std::optional<V> get(const K& k) {
    auto it = index_.find(k);
    if (it == index_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }
  void put(const K& k, V v) {
    if (auto it = index_.find(k); it != index_.end()) {
      it->second->second = std::move(v);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(k, std::move(v));
    index_[k] = order_.begin();
    if (order_.size() > cap_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }
  std::size_t size() const { return order_.size(); }

 private:
  std::size_t cap_;
  std::list<std::pair<K, V>> order_;
  std::unordered_map<K, typename std::list<std::pair<K, V>>::iterator> index_;
};

template <typename T>
struct Matrix {
  std::size_t r, c;
  std::vector<T> d;
  Matrix(std::size_t r_, std::size_t c_) : r(r_), c(c_), d(r_ * c_) {}
  T& at(std::size_t i, std::size_t j) { return d[i * c + j]; }
  const T& at(std::size_t i, std::size_t j) const { return d[i * c + j]; }
  Matrix operator*(const Matrix& o) const {
    Matrix m(r, o.c);
    for (std::size_t i = 0; i < r; ++i)
      for (std::size_t k = 0; k < c; ++k)
        for (std::size_t j = 0; j < o.c; ++j) m.at(i, j) += at(i, k) * o.at(k, j);
    return m;
  }
};

template <typename T, typename F>
auto map_vector(const std::vector<T>& v, F f) {
  std::vector<decltype(f(v[0]))> out;
  out.reserve(v.size());
  for (const auto& x : v) out.push_back(f(x));
  return out;
}

template <typename... Fs>
struct Overloaded : Fs... { using Fs::operator()...; };
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

using Shape = std::variant<std::pair<double, double>, double, std::tuple<double, double, double>>;
double area(const Shape& s) {
  return std::visit(Overloaded{
                        [](const std::pair<double, double>& rect) { return rect.first * rect.second; },
                        [](double radius) { return 3.141592653589793 * radius * radius; },
                        [](const std::tuple<double, double, double>& t) {
                          auto [a, b, c] = t;
                          double p = (a + b + c) / 2;
                          return std::sqrt(p * (p - a) * (p - b) * (p - c));
                        }},
                    s);
}

// ---------------------------------------------------------------- many instantiations
template <int N>
struct Unrolled {
  template <typename T>
  static T sum(const std::vector<T>& v) {
    T acc = Unrolled<N - 1>::sum(v);
    return v.size() > N ? acc + v[N] * T(N) : acc;
  }
};
template <>
struct Unrolled<0> {
  template <typename T>
  static T sum(const std::vector<T>& v) { return v.empty() ? T{} : v[0]; }
};

template <typename T>
std::string describe(const std::vector<T>& v) {
  std::ostringstream os;
  os << "n=" << v.size() << " sum=" << Unrolled<48>::sum(v);
  return os.str();
}

template <typename Container>
auto histogram(const Container& c) {
  std::map<typename Container::value_type, std::size_t> h;
  for (const auto& x : c) ++h[x];
  return h;
}

}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  std::mt19937 rng(argc);
  std::size_t n = 1000 + static_cast<std::size_t>(argc);

  Vec a(n, 1.5), b(n, 2.0), c(n, 0.25);
  Vec r = a * b + c - a * c + b;
  std::cout << "expr " << r[0] << " fib " << kFib[40]
            << " len " << Length<Map<AddPtr, Prepend<int, TypeList<char, double>>::type>::type>::value << "\n";

  auto tree = make_tree(5, rng);
  std::cout << render(*tree).size() << "\n";

  Graph<double> g(200);
  for (int i = 0; i < 800; ++i) g.add_edge(rng() % 200, rng() % 200, double(rng() % 100) / 3.0);
  auto dist = g.dijkstra(0);
  std::cout << "dist " << dist[10] << " bfs " << g.bfs_order(0).size() << " comps " << g.components() << "\n";

  Graph<long> gl(100);
  for (int i = 0; i < 300; ++i) gl.add_edge(rng() % 100, rng() % 100, long(rng() % 100));
  std::cout << "distl " << gl.dijkstra(1)[5] << "\n";

  std::string text = "The quick brown Fox jumps over the lazy dog; the DOG sleeps. " + std::string(argv[0]);
  auto stats = analyze(text);
  std::cout << "words " << stats.counts.size() << " longest " << stats.by_length.rbegin()->first << "\n";
  for (const auto& part : split("a,b,,c,d", ',')) std::cout << "[" << part << "]";
  std::cout << "\n";

  LruCache<std::string, std::vector<int>> cache(16);
  for (int i = 0; i < 100; ++i) cache.put("key" + std::to_string(i % 24), std::vector<int>(i % 7, i));
  std::cout << "cache " << cache.size() << " " << (cache.get("key3") ? "hit" : "miss") << "\n";
  LruCache<int, std::string> cache2(8);
  for (int i = 0; i < 50; ++i) cache2.put(i % 11, std::to_string(i));
  std::cout << "cache2 " << cache2.size() << "\n";

  Matrix<double> m1(8, 8), m2(8, 8);
  for (std::size_t i = 0; i < 64; ++i) m1.d[i] = m2.d[63 - i] = double(i);
  std::cout << "mat " << (m1 * m2).at(3, 4) << "\n";
  Matrix<long> m3(4, 4);
  std::cout << "matl " << (m3 * m3).at(0, 0) << "\n";

  std::vector<Shape> shapes{std::make_pair(2.0, 3.0), 1.0, std::make_tuple(3.0, 4.0, 5.0)};
  auto areas = map_vector(shapes, area);
  std::cout << "areas " << std::accumulate(areas.begin(), areas.end(), 0.0) << "\n";

  std::vector<int> vi(100);
  std::iota(vi.begin(), vi.end(), 0);
  std::vector<double> vd(vi.begin(), vi.end());
  std::vector<long> vl(vi.begin(), vi.end());
  std::cout << describe(vi) << " " << describe(vd) << " " << describe(vl) << "\n";
  auto strs = map_vector(vi, [](int x) { return std::to_string(x % 13); });
  std::cout << "hist " << histogram(strs).size() << " " << histogram(vi).size() << "\n";
  std::unordered_set<std::string> uniq(strs.begin(), strs.end());
  std::cout << "uniq " << uniq.size() << "\n";
  auto t0 = std::chrono::steady_clock::now();
  std::sort(strs.begin(), strs.end(), std::greater<>());
  auto t1 = std::chrono::steady_clock::now();
  std::cout << "sorted in " << std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() << "ns\n";
  return 0;
}
