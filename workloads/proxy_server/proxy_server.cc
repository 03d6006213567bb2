// proxy_server: a small multi-threaded "proxy" whose allocation sites have designed
// lifetimes, so a profile of it has a known ground truth (ground_truth.json, README.md).
//
//   listener thread --(RequestQueue)--> worker threads --> timer wheels --> sweeper threads
//
// The listener reads requests from synthetic clients at a fixed rate (on new, keep-alive
// or pipelined connections); workers set up new connections (plain, TLS or PROXY
// protocol) and route each request by its path to a handler (api, static, auth, admin,
// health, upload) that parses it, builds the response, fills a TTL cache, opens sessions
// and appends to never-freed logs and registries; three sweeper threads free what the
// workers scheduled when it is due.  Every allocation site is reached from several
// callers (listener paths, transports, handlers), so a profile holds several allocation
// contexts per site; a site's lifetime depends on the site only, never on the path.
//
// One source, two versions.  proxy_server_v1 (PROXY_V2=0, -O2) and proxy_server_v2
// (PROXY_V2=1, -O3) have the same behaviour and the same lifetime per site.  v2 is a
// realistic refactor of v1, not a rewrite: it keeps the top namespace `proxy` and most
// sub-namespaces, moves three (core -> server, upstream -> backend, log -> logging),
// renames or moves about half of the functions while keeping their domain words
// (free function ParseRequest -> RequestParser::ParseRequest, ResponseCache::Insert ->
// ResponseCache::Put, SessionTable::Open -> SessionTable::Create, Worker::Run ->
// Worker::Serve, route::HandleAuth -> route::HandleLogin, route::HandleHealth ->
// route::HealthCheck::Probe, ...; PX(v1, v2) below picks every name that differs), adds
// wrapper frames between some sites and the allocator (proxy::mem::Pool<Owner>::Take, ...)
// and inlines a v1 frame away.  So most tokens of v2's stacks occur in v1's, but no v2
// allocation stack equals a v1 one and most site functions differ.  The names that end
// up in allocation stacks are listed per version in ground_truth.json.

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifndef PROXY_V2
#define PROXY_V2 0
#endif

// PX(v1_name, v2_name) picks every name that differs between the versions; a few
// `#if PROXY_V2` blocks add v2's wrapper functions and the classes its free functions
// moved into.
#if PROXY_V2
#define PX(v1, v2) v2
#else
#define PX(v1, v2) v1
#endif

// A function that must stay a visible frame in allocation stacks: never inlined, cloned
// (.isra/.constprop) or folded with an identical function (-fipa-icf).
#define PX_FRAME __attribute__((noinline, noclone, no_icf))
// A frame in v1 that v2 always inlines into its caller (a build-to-build difference).
#if PROXY_V2
#define PX_V1_FRAME __attribute__((always_inline)) inline
#else
#define PX_V1_FRAME PX_FRAME
#endif

// ============================================================== design constants
// Lifetimes of the TTL'd sites: log-uniform in [lo, hi] ms, so T95 is close to hi, which
// sits near the geometric middle of its class.  Frees happen only after the deadline, so
// a loaded machine can only make lifetimes longer: hi leaves ~3x headroom below the
// class's upper bound.  Sites not listed here live for microseconds (class 10ms) or are
// never freed (class inf).
namespace design {
constexpr double kInflightMs[2] = {15.0, 35.0};      // class 100ms: 10 ms <= T95 < 100 ms
constexpr double kCacheTtlMs[2] = {150.0, 350.0};    // class 1s
constexpr double kSessionTtlMs[2] = {1500.0, 3500.0};  // class 10s
constexpr int64_t kWindDownNs = 250'000'000;  // listener stops this long before --seconds

// Per-request shape (bytes).  With the default 2000 requests/s every site allocates
// 14-32 MiB/s, i.e. 28-64 samples per second at a 512 KiB mean sampling interval.
constexpr size_t kRawBytes[2] = {4 << 10, 20 << 10};
constexpr int kHeaders[2] = {8, 40};  // header lines per request; 512 B per parsed field
constexpr size_t kResponseBytes[2] = {4 << 10, 20 << 10};
constexpr size_t kCachePayloadBytes[2] = {8 << 10, 40 << 10};
constexpr size_t kCacheKeyBytes[2] = {8 << 10, 20 << 10};
constexpr size_t kSessionStateBytes[2] = {16 << 10, 48 << 10};
constexpr size_t kLogRecordBytes[2] = {6 << 10, 10 << 10};
constexpr uint64_t kRequestsPerConnection = 4;  // the first one opens the connection

// Request mix.  Endpoints (http::Endpoint order: api, static, auth, admin, health,
// upload) by share of requests; per endpoint, the share of requests that fill the cache
// and that open a session.  Overall 50% of the requests are cacheable and 40% open a
// session, as before the requests were routed, so every site keeps its volume.
constexpr double kEndpointShare[6] = {0.40, 0.22, 0.12, 0.08, 0.08, 0.10};
constexpr double kCacheableShare[6] = {0.60, 1.00, 0.00, 0.00, 0.50, 0.00};  // 0.50
constexpr double kLoginShare[6] = {0.45, 0.00, 1.00, 0.80, 0.00, 0.35};      // 0.40
// New connections by transport (net::Transport order: plain, tls, proxied); the other
// requests of a connection arrive one by one (keep-alive) or pipelined.
constexpr double kTransportShare[3] = {0.45, 0.40, 0.15};
constexpr double kPipelinedShare = 0.30;
}  // namespace design

// ============================================================== utilities (both versions)
namespace util {

inline int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline void SleepUntil(int64_t t_ns) {
  timespec ts{time_t(t_ns / 1'000'000'000), long(t_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

inline uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Deterministic uniform [0, 1) for (request id, purpose).
inline double Unit(uint64_t id, uint64_t salt) {
  return double(Mix(id * 0x100000001b3ULL ^ (salt << 56 | salt)) >> 11) * 0x1.0p-53;
}

// Deterministic pick of an index for (request id, purpose), by shares summing to 1.
template <size_t N>
inline int Pick(uint64_t id, uint64_t salt, const double (&shares)[N]) {
  double u = Unit(id, salt);
  for (size_t i = 0; i + 1 < N; ++i) {
    if (u < shares[i]) return int(i);
    u -= shares[i];
  }
  return int(N - 1);
}

inline size_t Between(uint64_t id, uint64_t salt, const size_t (&range)[2]) {
  return range[0] + size_t(Unit(id, salt) * double(range[1] - range[0] + 1));
}

inline int64_t LifetimeNs(uint64_t id, uint64_t salt, const double (&ms)[2]) {
  return int64_t(ms[0] * std::pow(ms[1] / ms[0], Unit(id, salt)) * 1e6);
}

inline uint64_t Checksum(const void* data, size_t n) {  // FNV-1a over a prefix
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n && i < 256; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// Intrusive timer wheel: items (with `T* next` and `int64_t deadline_ns`) are freed by a
// sweeper thread once due.  No allocation of its own, so it adds no allocation sites.
template <class T, size_t kBuckets>
class TimerWheel {
 public:
  explicit TimerWheel(int64_t granularity_ns) : granularity_(granularity_ns) {}

  void Start(int64_t now) { cursor_ = now / granularity_; }

  void Schedule(T* item) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t tick = std::max(item->deadline_ns / granularity_, cursor_);
    T*& head = buckets_[size_t(tick) % kBuckets];
    item->next = head;
    head = item;
    ++size_;
  }

  // Unlinks every item whose deadline has passed and returns them as a list.
  T* CollectDue(int64_t now) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now_tick = now / granularity_;
    T* due = nullptr;
    for (int64_t t = cursor_; t <= now_tick && t < cursor_ + int64_t(kBuckets); ++t) {
      for (T** link = &buckets_[size_t(t) % kBuckets]; *link != nullptr;) {
        T* item = *link;
        if (item->deadline_ns <= now) {
          *link = item->next;
          item->next = due;
          due = item;
          --size_;
        } else {
          link = &item->next;
        }
      }
    }
    cursor_ = now_tick;
    return due;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return size_;
  }

 private:
  std::mutex mu_;
  T* buckets_[kBuckets] = {};
  int64_t granularity_;
  int64_t cursor_ = 0;
  size_t size_ = 0;
};

// Runs `sweep(now)` every `period_ns` until `stop` is set.
template <class Sweep>
inline void EveryPeriod(int64_t period_ns, const std::atomic<bool>& stop, Sweep sweep) {
  for (int64_t next = NowNs(); !stop.load(std::memory_order_acquire);) {
    sweep(NowNs());
    next += period_ns;
    const int64_t now = NowNs();
    if (next < now) next = now;  // fell behind (loaded machine): do not burst
    SleepUntil(next);
  }
}

}  // namespace util

// ============================================================== run configuration
namespace run {
struct Config {
  double seconds = 12.0;
  int threads = 2;
  double rate = 2000.0;  // requests per second
  bool drain = true;
};

struct State {
  Config config;
  int64_t start_ns = 0;
  int64_t end_ns = 0;          // start + --seconds
  int64_t listen_until_ns = 0;  // the listener stops here
  std::atomic<bool> stop_sweepers{false};
  std::atomic<uint64_t> requests{0}, dropped{0}, cache_entries{0}, sessions{0},
      log_records{0}, connections{0};

  // With --drain (default) a TTL'd object is only created if it can expire before the
  // end, so every non-inf sample in a profile is a measured lifetime, not a censored one.
  bool MayCreate(const double (&ttl_ms)[2], int64_t now) const {
    return !config.drain || now + int64_t(ttl_ms[1] * 1e6) < listen_until_ns;
  }
};
State g;
}  // namespace run

// ============================================================== declarations
// Namespaces first, then an alias per namespace so the code below reads the same in both
// versions; the aliases never appear in symbols.
namespace proxy::net {}
namespace proxy::http {}
namespace PX(proxy::core, proxy::server) {}
namespace PX(proxy::upstream, proxy::backend) {}
namespace proxy::cache {}
namespace proxy::session {}
namespace PX(proxy::log, proxy::logging) {}
namespace proxy::route {}
namespace net = proxy::net;
namespace http = proxy::http;
namespace core = PX(proxy::core, proxy::server);
namespace upstream = PX(proxy::upstream, proxy::backend);
namespace cache = proxy::cache;
namespace session = proxy::session;
namespace applog = PX(proxy::log, proxy::logging);
namespace route = proxy::route;

#if PROXY_V2
// v2's allocation helper: one instantiation per owner type, so each stays a distinct
// frame (and a distinct allocation site) right above malloc.
namespace proxy::mem {
template <class Owner>
struct Pool {
  PX_FRAME static void* Take(size_t bytes) {
    void* p = std::malloc(bytes);
    if (p == nullptr) std::abort();
    taken.fetch_add(bytes, std::memory_order_relaxed);
    return p;
  }
  static inline std::atomic<uint64_t> taken{0};
};
}  // namespace proxy::mem
#endif

namespace proxy::net {
// How a request's connection came in: kReused for the later requests of a connection,
// else the transport of the new connection it opens.
enum class Transport : uint8_t { kReused, kPlain, kTls, kProxied };

struct Request {
  uint64_t id = 0;
  int64_t arrival_ns = 0;
  Transport transport = Transport::kReused;
  std::string raw;  // the request text, moved (never copied) through the queue
};

// Bounded ring of requests from the listener to the workers.  Requests move in and out,
// so the queue itself never allocates.
class RequestQueue {
 public:
  bool Push(Request&& r);
  bool Pop(Request* out);  // blocks; false once closed and empty
  void Close();

 private:
  static constexpr size_t kCapacity = 1 << 13;
  std::mutex mu_;
  std::condition_variable cv_;
  Request slots_[kCapacity];
  size_t head_ = 0, tail_ = 0;
  bool closed_ = false;
};

class Connection {
 public:
  // Site request_raw (class 10ms): allocated here on the listener thread, freed by the
  // worker that parsed it (a cross-thread free); lives for the queueing delay.
  PX_FRAME static void PX(ReadRequest, ReceiveRequest)(uint64_t id, Request* out);
};
#if PROXY_V2
class FrameReader {
 public:
  // v2: the text's allocation.  Connection::ReceiveRequest ends with a tail call to Fill,
  // so at -O3 its frame is not in the stack (Fill's caller shows as Listener::Run).
  PX_FRAME static void Fill(uint64_t id, std::string* text);
};
#endif

class Listener {
 public:
  PX_FRAME static void Run(RequestQueue* queue);
  // The three ways a request is read, each a caller of the request_raw site: the first
  // request of a new connection, a later one on an idle keep-alive connection, or one
  // pipelined behind the previous request.  Each does work after the read, so none ends
  // in a tail call (which would drop its frame from the stack).
  PX_FRAME static bool Accept(uint64_t id, Request* out);
  PX_FRAME static bool PX(ReadKeepAlive, PollKeepAlive)(uint64_t id, Request* out);
  PX_FRAME static bool ReadPipelined(uint64_t id, Request* out);
};
}  // namespace proxy::net

namespace proxy::http {
// What a request asks for, by the first segment of its path (design::kEndpointShare).
enum class Endpoint : uint8_t { kApi, kStatic, kAuth, kAdmin, kHealth, kUpload };
constexpr int kEndpoints = 6;
constexpr const char* kEndpointMethods[kEndpoints] = {"GET", "GET", "POST", "GET", "GET", "PUT"};
constexpr const char* kEndpointPrefixes[kEndpoints] = {"/api/", "/static/", "/auth/",
                                                       "/admin/", "/healthz/", "/upload/"};

// The router's match: the endpoint of a request line ("METHOD /path ..."), found without
// parsing (or allocating) anything else.  Unknown paths go to the api handler.
inline Endpoint MatchEndpoint(const char* text, size_t n) {
  const char* space = static_cast<const char*>(std::memchr(text, ' ', std::min<size_t>(n, 8)));
  if (space == nullptr) return Endpoint::kApi;
  const char* path = space + 1;
  const size_t left = n - size_t(path - text);
  for (int e = 0; e < kEndpoints; ++e) {
    const size_t len = std::strlen(kEndpointPrefixes[e]);
    if (left >= len && std::memcmp(path, kEndpointPrefixes[e], len) == 0) return Endpoint(e);
  }
  return Endpoint::kApi;
}

struct ParsedRequest {
  uint64_t id = 0;
  uint64_t route = 0;  // hash of the request line
  uint64_t connection = 0;
  Endpoint endpoint = Endpoint::kApi;
  int header_count = 0;
  size_t header_bytes = 0;
  size_t body_bytes = 0;
  bool cacheable = false;
  bool login = false;
};

struct HeaderField {  // 512 bytes: a normalized copy of one header line
  uint32_t name_hash = 0;
  uint16_t name_len = 0, value_len = 0;
  char name[88];
  char value[416];
};

// Site header_table (10ms): the parsed header fields, freed when the worker is done.
// The same function in both versions.
PX_FRAME std::vector<HeaderField> ParseHeaders(const std::string& raw,
                                               const ParsedRequest& req);
#if PROXY_V2
// v2 moved the free functions ParseRequest and BuildResponse into classes.
class RequestParser {
 public:
  // Site parse_scratch (10ms): v2 takes its scratch from proxy::mem::Pool<RequestParser>.
  PX_FRAME static ParsedRequest ParseRequest(const std::string& raw, uint64_t id);
};
class ResponseWriter {
 public:
  PX_FRAME static std::vector<char> Write(const ParsedRequest& req,
                                          const std::vector<HeaderField>& headers);
  // Site response_body (100ms), below Write.
  PX_FRAME static std::vector<char> BuildResponse(const ParsedRequest& req,
                                                  const std::vector<HeaderField>& headers);
};
#else
// Site parse_scratch (10ms): a decode buffer freed before returning.
PX_FRAME ParsedRequest ParseRequest(const std::string& raw, uint64_t id);
// Site response_body (100ms): freed by the responder thread after the upstream delay.
PX_FRAME std::vector<char> BuildResponse(const ParsedRequest& req,
                                         const std::vector<HeaderField>& headers);
#endif
}  // namespace proxy::http

namespace PX(proxy::core, proxy::server) {
// Site inflight_state (100ms): one per request waiting for its (simulated) upstream.
struct InFlightRequest {
  InFlightRequest* next = nullptr;
  int64_t deadline_ns = 0;
  uint64_t id = 0;
  std::vector<char> body;
  char upstream_headers[8000];
};

class RequestTracker {
 public:
  PX_FRAME static InFlightRequest* PX(Begin, Track)(const net::Request& req,
                                                   const http::ParsedRequest& parsed);
};

// Site conn_registry (inf): per-connection statistics, registered and never freed.
struct ConnectionStats {
  ConnectionStats* next;
  uint64_t connection;
  uint64_t latency_histogram[1024];
  uint64_t size_histogram[1024];
  uint64_t route_counts[2046];  // 32 KiB in all
};

class ConnectionRegistry {
 public:
  PX_FRAME static ConnectionStats* PX(Register, Admit)(uint64_t connection);
  static std::mutex mu;
  static ConnectionStats* head;  // everything stays reachable from here
};

// Sets up a new connection on its first request, by transport; each registers the
// connection's statistics (three callers of the conn_registry site).
class Acceptor {
 public:
  PX_FRAME static ConnectionStats* AcceptPlain(uint64_t connection);
  PX_FRAME static ConnectionStats* PX(AcceptTls, TerminateTls)(uint64_t connection);
  PX_FRAME static ConnectionStats* AcceptProxied(uint64_t connection);
};

class Worker {
 public:
  PX_FRAME static void PX(Run, Serve)(net::RequestQueue* queue);
  PX_V1_FRAME static void Handle(net::Request& req);
};
}  // namespace PX(proxy::core, proxy::server)

namespace PX(proxy::upstream, proxy::backend) {
// Completes in-flight requests when their upstream "answers": frees the state and the
// response body on its own thread (cross-thread frees).
class Responder {
 public:
  static void Schedule(core::InFlightRequest* r);
  PX_FRAME static void Run();
  PX_FRAME static void Complete(core::InFlightRequest* r);
  static util::TimerWheel<core::InFlightRequest, 128> wheel;  // 1 ms ticks
};
}  // namespace PX(proxy::upstream, proxy::backend)

namespace proxy::cache {
// Site cache_entry (1s): header and payload in one block; site cache_key (1s): its key.
struct CacheEntry {
  CacheEntry* next = nullptr;
  int64_t deadline_ns = 0;
  uint64_t route = 0;
  std::string key;
  size_t payload_bytes = 0;
  char* payload() { return reinterpret_cast<char*>(this + 1); }
};

#if PROXY_V2
// v2 moved MakeCacheKey into KeyBuilder and renamed ResponseCache::Insert to Put.
class KeyBuilder {
 public:
  PX_FRAME static std::string MakeCacheKey(const http::ParsedRequest& req,
                                           const std::vector<http::HeaderField>& headers);
};
class ResponseCache {
 public:
  PX_FRAME static void Put(const http::ParsedRequest& req,
                           const std::vector<http::HeaderField>& headers,
                           const std::vector<char>& body);
  PX_FRAME static CacheEntry* AllocateSlot(size_t payload_bytes);  // -> Pool<ResponseCache>
  static util::TimerWheel<CacheEntry, 256> wheel;  // 5 ms ticks
};
#else
PX_FRAME std::string MakeCacheKey(const http::ParsedRequest& req,
                                  const std::vector<http::HeaderField>& headers);
class ResponseCache {
 public:
  PX_FRAME static void Insert(const http::ParsedRequest& req,
                              const std::vector<http::HeaderField>& headers,
                              const std::vector<char>& body);
  static util::TimerWheel<CacheEntry, 256> wheel;  // 5 ms ticks
};
#endif

class Evictor {
 public:
  PX_FRAME static void Run();
  PX_FRAME static void Evict(CacheEntry* e);
};
}  // namespace proxy::cache

namespace proxy::session {
// Site session_object (10s): the session; site session_state (10s): its state buffer.
class PX(Session, UserSession) {
 public:
  PX_FRAME void RestoreState(size_t bytes);

  PX(Session, UserSession)* next = nullptr;
  int64_t deadline_ns = 0;
  uint64_t user = 0;
  std::vector<uint8_t> state;
  char cookie_jar[24 << 10];
};
using SessionT = PX(Session, UserSession);

class SessionTable {
 public:
  PX_FRAME static SessionT* PX(Open, Create)(const http::ParsedRequest& req);
  static util::TimerWheel<SessionT, 512> wheel;  // 20 ms ticks
};

class Janitor {
 public:
  PX_FRAME static void Run();
  PX_FRAME static void Expire(SessionT* s);
};
}  // namespace proxy::session

namespace PX(proxy::log, proxy::logging) {
// Site access_log (inf): one record per request, kept forever.
struct LogRecord {
  LogRecord* next;
  uint64_t id;
  size_t bytes;
  char* text() { return reinterpret_cast<char*>(this + 1); }
};

class AccessLog {
 public:
  PX_FRAME static void PX(Append, Record)(const http::ParsedRequest& req,
                                          const std::vector<http::HeaderField>& headers);
#if PROXY_V2
  PX_FRAME static LogRecord* NewRecord(size_t text_bytes);
#endif
  static std::mutex mu;
  static LogRecord* head;  // everything stays reachable from here
};
}  // namespace PX(proxy::log, proxy::logging)

namespace proxy::route {
// One handler per endpoint; Worker::Handle dispatches on http::MatchEndpoint.  Each
// handler parses the request, tracks it in flight, builds the response and logs it, and,
// depending on the endpoint, fills the cache and opens a session: so the worker's sites
// are each reached from several handlers.  A handler returns the in-flight request for
// the worker to schedule.  v2 renames or moves half of them (PX).
using InFlight = core::InFlightRequest;
PX_FRAME InFlight* HandleApi(net::Request& req, int64_t now);
PX_FRAME InFlight* HandleAdmin(net::Request& req, int64_t now);
PX_FRAME InFlight* HandleUpload(net::Request& req, int64_t now);
#if PROXY_V2
PX_FRAME InFlight* HandleLogin(net::Request& req, int64_t now);  // v1 HandleAuth
class StaticFiles {
 public:
  PX_FRAME static InFlight* HandleStatic(net::Request& req, int64_t now);
};
class HealthCheck {
 public:
  PX_FRAME static InFlight* Probe(net::Request& req, int64_t now);  // v1 HandleHealth
};
class SessionGuard {
 public:
  PX_FRAME static session::SessionT* RequireSession(const http::ParsedRequest& req);
};
#else
PX_FRAME InFlight* HandleStatic(net::Request& req, int64_t now);
PX_FRAME InFlight* HandleAuth(net::Request& req, int64_t now);
PX_FRAME InFlight* HandleHealth(net::Request& req, int64_t now);
// Opens the session a logged-in request needs (api, admin, upload; auth opens its own).
PX_FRAME session::SessionT* RequireSession(const http::ParsedRequest& req);
#endif
}  // namespace proxy::route

// ============================================================== listener
namespace proxy::net {

bool RequestQueue::Push(Request&& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tail_ - head_ == kCapacity) return false;
    slots_[tail_++ % kCapacity] = std::move(r);
  }
  cv_.notify_one();
  return true;
}

bool RequestQueue::Pop(Request* out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return head_ != tail_ || closed_; });
  if (head_ == tail_) return false;
  *out = std::move(slots_[head_++ % kCapacity]);
  return true;
}

void RequestQueue::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

// What synthetic client `id` sends: request line, headers, then a body up to its size.
static inline void WriteRequestText(uint64_t id, size_t bytes, std::string* out) {
  char line[160];
  const int headers = design::kHeaders[0] +
                      int(util::Unit(id, 2) * (design::kHeaders[1] - design::kHeaders[0] + 1));
  static constexpr const char* kResources[http::kEndpoints] = {
      "v3/items", "assets/bundle", "login/client", "stats/shard", "probe/pool", "blobs/bucket"};
  const int endpoint = util::Pick(id, 13, design::kEndpointShare);
  int n = std::snprintf(line, sizeof line, "%s %s%s-%u/%" PRIu64 " HTTP/1.1\r\nHost: svc-%u\r\n",
                        http::kEndpointMethods[endpoint], http::kEndpointPrefixes[endpoint],
                        kResources[endpoint], unsigned(util::Mix(id) % 97), id,
                        unsigned(id % 13));
  out->append(line, size_t(n));
  for (int h = 0; h < headers; ++h) {
    n = std::snprintf(line, sizeof line, "X-Trace-%02d: %016" PRIx64 "-%08x\r\n", h,
                      util::Mix(id + uint64_t(h)), unsigned(h * 2654435761u));
    out->append(line, size_t(n));
  }
  out->append("\r\n");
  if (out->size() < bytes) out->append(bytes - out->size(), char('a' + id % 26));
}

#if PROXY_V2
void FrameReader::Fill(uint64_t id, std::string* text) {
  const size_t bytes = util::Between(id, 1, design::kRawBytes);
  text->reserve(bytes);  // the headers (< 2 KiB) fit: one allocation per request
  WriteRequestText(id, bytes, text);
}

void Connection::ReceiveRequest(uint64_t id, Request* out) {
  out->id = id;
  out->arrival_ns = util::NowNs();
  FrameReader::Fill(id, &out->raw);
}
#else
void Connection::ReadRequest(uint64_t id, Request* out) {
  const size_t bytes = util::Between(id, 1, design::kRawBytes);
  out->id = id;
  out->arrival_ns = util::NowNs();
  out->raw.reserve(bytes);  // the headers (< 2 KiB) fit: one allocation per request
  WriteRequestText(id, bytes, &out->raw);
}
#endif

bool Listener::Accept(uint64_t id, Request* out) {
  Connection::PX(ReadRequest, ReceiveRequest)(id, out);
  const uint64_t connection = id / design::kRequestsPerConnection;
  out->transport = Transport(1 + util::Pick(connection, 14, design::kTransportShare));
  return true;
}

bool Listener::PX(ReadKeepAlive, PollKeepAlive)(uint64_t id, Request* out) {
  Connection::PX(ReadRequest, ReceiveRequest)(id, out);
  out->transport = Transport::kReused;
  return true;
}

bool Listener::ReadPipelined(uint64_t id, Request* out) {
  Connection::PX(ReadRequest, ReceiveRequest)(id, out);
  out->transport = Transport::kReused;
  return !out->raw.empty();
}

// Admits `rate` requests per second, paced by a 1 ms tick.
void Listener::Run(RequestQueue* queue) {
  const double per_ns = run::g.config.rate / 1e9;
  uint64_t next_id = 0;
  for (int64_t tick = util::NowNs(); tick < run::g.listen_until_ns; tick += 1'000'000) {
    util::SleepUntil(tick);
    const int64_t now = util::NowNs();
    const uint64_t due = uint64_t(double(now - run::g.start_ns) * per_ns);
    for (int burst = 0; next_id < due && burst < 64; ++burst, ++next_id) {
      Request r;
      if (next_id % design::kRequestsPerConnection == 0)
        Accept(next_id, &r);
      else if (util::Unit(next_id, 15) < design::kPipelinedShare)
        ReadPipelined(next_id, &r);
      else
        PX(ReadKeepAlive, PollKeepAlive)(next_id, &r);
      if (!queue->Push(std::move(r))) run::g.dropped.fetch_add(1, std::memory_order_relaxed);
    }
    if (tick < now - 50'000'000) tick = now;  // far behind: skip ahead rather than burst
  }
  queue->Close();
}
}  // namespace proxy::net

// ============================================================== protocol
namespace proxy::http {

static inline ParsedRequest Decode(const char* text, size_t n, uint64_t id) {
  ParsedRequest req;
  req.id = id;
  const char* end = text + n;
  const char* line_end = static_cast<const char*>(std::memchr(text, '\n', n));
  for (const char* p = text; p < (line_end ? line_end : end); ++p) req.route = req.route * 31 + *p;
  for (const char* p = line_end; p && p + 2 < end; p = static_cast<const char*>(
                                                       std::memchr(p + 1, '\n', end - p - 1))) {
    if (p[1] == '\r') {  // blank line: end of headers
      req.header_bytes = size_t(p + 3 - text);
      break;
    }
    ++req.header_count;
  }
  --req.header_count;  // the Host line is not an extension header
  req.body_bytes = n - req.header_bytes;
  req.endpoint = MatchEndpoint(text, n);
  req.cacheable = util::Unit(id, 11) < design::kCacheableShare[int(req.endpoint)];
  req.login = util::Unit(id, 12) < design::kLoginShare[int(req.endpoint)];
  req.connection = id / design::kRequestsPerConnection;
  return req;
}

#if PROXY_V2
ParsedRequest RequestParser::ParseRequest(const std::string& raw, uint64_t id) {
  char* scratch = static_cast<char*>(proxy::mem::Pool<RequestParser>::Take(raw.size()));
#else
ParsedRequest ParseRequest(const std::string& raw, uint64_t id) {
  char* scratch = static_cast<char*>(std::malloc(raw.size()));
  if (scratch == nullptr) std::abort();
#endif
  // Decode into scratch (lower-cased header names), parse the copy, drop it.
  std::memcpy(scratch, raw.data(), raw.size());
  for (size_t i = 0; i < raw.size() && i < 4096; ++i)
    if (scratch[i] >= 'A' && scratch[i] <= 'Z') scratch[i] = char(scratch[i] + 32);
  ParsedRequest req = Decode(scratch, raw.size(), id);
  std::free(scratch);
  return req;
}

std::vector<HeaderField> ParseHeaders(const std::string& raw, const ParsedRequest& req) {
  std::vector<HeaderField> fields;
  fields.reserve(size_t(req.header_count));
  const char* const end = raw.data() + req.header_bytes;
  auto find = [end](const char* from, char c, size_t limit) -> const char* {
    return from < end ? static_cast<const char*>(
                            std::memchr(from, c, std::min(limit, size_t(end - from))))
                      : nullptr;
  };
  const char* p = find(raw.data(), '\n', raw.size());
  p = p ? find(p + 1, '\n', raw.size()) : nullptr;  // skip the Host line
  for (int h = 0; p != nullptr && h < req.header_count; ++h) {
    const char* line = p + 1;
    const char* colon = find(line, ':', 96);
    const char* eol = find(line, '\r', 512);
    if (colon == nullptr || eol == nullptr) break;
    HeaderField& f = fields.emplace_back();
    f.name_len = uint16_t(std::min<size_t>(size_t(colon - line), sizeof f.name - 1));
    std::memcpy(f.name, line, f.name_len);
    f.name[f.name_len] = 0;
    f.value_len = uint16_t(std::min<size_t>(size_t(eol - colon - 2), sizeof f.value - 1));
    std::memcpy(f.value, colon + 2, f.value_len);
    f.value[f.value_len] = 0;
    f.name_hash = uint32_t(util::Checksum(f.name, f.name_len));
    p = eol + 1;
  }
  return fields;
}

#if PROXY_V2
std::vector<char> ResponseWriter::Write(const ParsedRequest& req,
                                        const std::vector<HeaderField>& headers) {
  std::vector<char> out = BuildResponse(req, headers);
  out[0] = 'H';  // status line written by the outer layer
  return out;
}
#endif

std::vector<char> PX(BuildResponse, ResponseWriter::BuildResponse)(
    const ParsedRequest& req, const std::vector<HeaderField>& headers) {
  std::vector<char> body(util::Between(req.id, 3, design::kResponseBytes));
  int n = std::snprintf(body.data(), body.size(),
                        "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nX-Route: %" PRIx64 "\r\n",
                        body.size(), req.route);
  for (const HeaderField& f : headers) {
    if (size_t(n) + f.name_len + 16 >= body.size()) break;
    n += std::snprintf(body.data() + n, body.size() - size_t(n), "Echo-%s: 1\r\n", f.name);
  }
  return body;
}
}  // namespace proxy::http

// ============================================================== request pipeline
namespace PX(proxy::core, proxy::server) {

std::mutex ConnectionRegistry::mu;
ConnectionStats* ConnectionRegistry::head = nullptr;

InFlightRequest* RequestTracker::PX(Begin, Track)(
    const net::Request& req, const http::ParsedRequest& parsed) {
  auto* r = new InFlightRequest;
  r->id = parsed.id;
  std::memcpy(r->upstream_headers, req.raw.data(),
              std::min(sizeof r->upstream_headers, parsed.header_bytes));
  r->deadline_ns = util::NowNs() + util::LifetimeNs(parsed.id, 21, design::kInflightMs);
  return r;
}

ConnectionStats* ConnectionRegistry::PX(Register, Admit)(uint64_t connection) {
  auto* c = new ConnectionStats();  // value-initialized: the histograms start at zero
  c->connection = connection;
  std::lock_guard<std::mutex> lock(mu);
  c->next = head;
  head = c;
  run::g.connections.fetch_add(1, std::memory_order_relaxed);
  return c;
}

// The stores after each Register call keep these frames out of tail calls.
ConnectionStats* Acceptor::AcceptPlain(uint64_t connection) {
  ConnectionStats* c = ConnectionRegistry::PX(Register, Admit)(connection);
  ++c->route_counts[0];  // by transport: plain, tls, proxied
  return c;
}

ConnectionStats* Acceptor::PX(AcceptTls, TerminateTls)(uint64_t connection) {
  ConnectionStats* c = ConnectionRegistry::PX(Register, Admit)(connection);
  ++c->route_counts[1];
  return c;
}

ConnectionStats* Acceptor::AcceptProxied(uint64_t connection) {
  ConnectionStats* c = ConnectionRegistry::PX(Register, Admit)(connection);
  ++c->route_counts[2];
  return c;
}

void Worker::Handle(net::Request& req) {
  const int64_t now = util::NowNs();
  const uint64_t connection = req.id / design::kRequestsPerConnection;
  switch (req.transport) {  // the first request of a connection sets it up
    case net::Transport::kPlain: Acceptor::AcceptPlain(connection); break;
    case net::Transport::kTls: Acceptor::PX(AcceptTls, TerminateTls)(connection); break;
    case net::Transport::kProxied: Acceptor::AcceptProxied(connection); break;
    case net::Transport::kReused: break;
  }

  InFlightRequest* inflight = nullptr;
  switch (http::MatchEndpoint(req.raw.data(), req.raw.size())) {
    case http::Endpoint::kApi: inflight = route::HandleApi(req, now); break;
    case http::Endpoint::kStatic:
      inflight = route::PX(HandleStatic, StaticFiles::HandleStatic)(req, now);
      break;
    case http::Endpoint::kAuth: inflight = route::PX(HandleAuth, HandleLogin)(req, now); break;
    case http::Endpoint::kAdmin: inflight = route::HandleAdmin(req, now); break;
    case http::Endpoint::kHealth:
      inflight = route::PX(HandleHealth, HealthCheck::Probe)(req, now);
      break;
    case http::Endpoint::kUpload: inflight = route::HandleUpload(req, now); break;
  }
  upstream::Responder::Schedule(inflight);
  run::g.requests.fetch_add(1, std::memory_order_relaxed);
}

void Worker::PX(Run, Serve)(net::RequestQueue* queue) {
  net::Request req;
  while (queue->Pop(&req)) Handle(req);
}
}  // namespace PX(proxy::core, proxy::server)

// ============================================================== route handlers
// Every handler: parse, track in flight, respond, log; the endpoint decides the rest
// (design::kCacheableShare, kLoginShare) and the order.  The request text is freed once
// the upstream request has copied its headers; the header table when the handler returns.
// No handler ends in a call (the header table's destructor runs last), so none is
// tail-called away.
namespace proxy::route {

static bool MayCache(const http::ParsedRequest& p, int64_t now) {
  return p.cacheable && run::g.MayCreate(design::kCacheTtlMs, now);
}

static bool MayOpenSession(const http::ParsedRequest& p, int64_t now) {
  return p.login && run::g.MayCreate(design::kSessionTtlMs, now);
}

// api: forwarded upstream; cacheable reads fill the cache; a logged-in caller gets its
// session (re)opened.
InFlight* HandleApi(net::Request& req, int64_t now) {
  const http::ParsedRequest parsed =
      http::PX(ParseRequest, RequestParser::ParseRequest)(req.raw, req.id);
  const std::vector<http::HeaderField> headers = http::ParseHeaders(req.raw, parsed);
  InFlight* inflight = core::RequestTracker::PX(Begin, Track)(req, parsed);
  inflight->body = http::PX(BuildResponse, ResponseWriter::Write)(parsed, headers);
  std::string().swap(req.raw);  // request text done: freed here, allocated by the listener
  if (MayCache(parsed, now))
    cache::ResponseCache::PX(Insert, Put)(parsed, headers, inflight->body);
  if (MayOpenSession(parsed, now)) PX(RequireSession, SessionGuard::RequireSession)(parsed);
  applog::AccessLog::PX(Append, Record)(parsed, headers);
  return inflight;
}

// static: files from the origin, always cacheable, no sessions.
InFlight* PX(HandleStatic, StaticFiles::HandleStatic)(net::Request& req, int64_t now) {
  const http::ParsedRequest parsed =
      http::PX(ParseRequest, RequestParser::ParseRequest)(req.raw, req.id);
  const std::vector<http::HeaderField> headers = http::ParseHeaders(req.raw, parsed);
  InFlight* inflight = core::RequestTracker::PX(Begin, Track)(req, parsed);
  std::string().swap(req.raw);
  inflight->body = http::PX(BuildResponse, ResponseWriter::Write)(parsed, headers);
  applog::AccessLog::PX(Append, Record)(parsed, headers);
  if (MayCache(parsed, now))
    cache::ResponseCache::PX(Insert, Put)(parsed, headers, inflight->body);
  return inflight;
}

// auth: a login opens the session first, then the credentials go upstream; never cached.
InFlight* PX(HandleAuth, HandleLogin)(net::Request& req, int64_t now) {
  const http::ParsedRequest parsed =
      http::PX(ParseRequest, RequestParser::ParseRequest)(req.raw, req.id);
  const std::vector<http::HeaderField> headers = http::ParseHeaders(req.raw, parsed);
  if (MayOpenSession(parsed, now)) session::SessionTable::PX(Open, Create)(parsed);
  InFlight* inflight = core::RequestTracker::PX(Begin, Track)(req, parsed);
  std::string().swap(req.raw);
  inflight->body = http::PX(BuildResponse, ResponseWriter::Write)(parsed, headers);
  applog::AccessLog::PX(Append, Record)(parsed, headers);
  return inflight;
}

// admin: the console needs a session before anything is forwarded; never cached.
InFlight* HandleAdmin(net::Request& req, int64_t now) {
  const http::ParsedRequest parsed =
      http::PX(ParseRequest, RequestParser::ParseRequest)(req.raw, req.id);
  const std::vector<http::HeaderField> headers = http::ParseHeaders(req.raw, parsed);
  if (MayOpenSession(parsed, now)) PX(RequireSession, SessionGuard::RequireSession)(parsed);
  applog::AccessLog::PX(Append, Record)(parsed, headers);  // audited before it runs
  InFlight* inflight = core::RequestTracker::PX(Begin, Track)(req, parsed);
  std::string().swap(req.raw);
  inflight->body = http::PX(BuildResponse, ResponseWriter::Write)(parsed, headers);
  return inflight;
}

// health: probes the upstream pool; half the probes refresh the cached status.
InFlight* PX(HandleHealth, HealthCheck::Probe)(net::Request& req, int64_t now) {
  const http::ParsedRequest parsed =
      http::PX(ParseRequest, RequestParser::ParseRequest)(req.raw, req.id);
  const std::vector<http::HeaderField> headers = http::ParseHeaders(req.raw, parsed);
  InFlight* inflight = core::RequestTracker::PX(Begin, Track)(req, parsed);
  std::string().swap(req.raw);
  inflight->body = http::PX(BuildResponse, ResponseWriter::Write)(parsed, headers);
  if (MayCache(parsed, now))
    cache::ResponseCache::PX(Insert, Put)(parsed, headers, inflight->body);
  applog::AccessLog::PX(Append, Record)(parsed, headers);
  return inflight;
}

// upload: the body streams upstream; the uploader's session is opened on the way.
InFlight* HandleUpload(net::Request& req, int64_t now) {
  const http::ParsedRequest parsed =
      http::PX(ParseRequest, RequestParser::ParseRequest)(req.raw, req.id);
  const std::vector<http::HeaderField> headers = http::ParseHeaders(req.raw, parsed);
  InFlight* inflight = core::RequestTracker::PX(Begin, Track)(req, parsed);
  std::string().swap(req.raw);
  if (MayOpenSession(parsed, now)) PX(RequireSession, SessionGuard::RequireSession)(parsed);
  inflight->body = http::PX(BuildResponse, ResponseWriter::Write)(parsed, headers);
  applog::AccessLog::PX(Append, Record)(parsed, headers);
  return inflight;
}

session::SessionT* PX(RequireSession, SessionGuard::RequireSession)(
    const http::ParsedRequest& req) {
  static std::atomic<uint64_t> required{0};
  session::SessionT* s = session::SessionTable::PX(Open, Create)(req);
  required.fetch_add(1, std::memory_order_relaxed);  // after the call: no tail call
  return s;
}
}  // namespace proxy::route

// ============================================================== upstream completion
namespace PX(proxy::upstream, proxy::backend) {

util::TimerWheel<core::InFlightRequest, 128> Responder::wheel{1'000'000};

void Responder::Schedule(core::InFlightRequest* r) {
  wheel.Schedule(r);
}

void Responder::Complete(core::InFlightRequest* r) {
  static std::atomic<uint64_t> sent_checksum{0};
  sent_checksum.fetch_xor(util::Checksum(r->body.data(), r->body.size()),
                          std::memory_order_relaxed);
  delete r;  // frees the in-flight state and the response body
}

void Responder::Run() {
  util::EveryPeriod(1'000'000, run::g.stop_sweepers, [](int64_t now) {
    for (core::InFlightRequest* r = wheel.CollectDue(now); r != nullptr;) {
      core::InFlightRequest* next = r->next;
      Complete(r);
      r = next;
    }
  });
}
}  // namespace PX(proxy::upstream, proxy::backend)

// ============================================================== cache
namespace proxy::cache {

using CacheT = ResponseCache;
util::TimerWheel<CacheEntry, 256> CacheT::wheel{5'000'000};

std::string PX(MakeCacheKey, KeyBuilder::MakeCacheKey)(
    const http::ParsedRequest& req, const std::vector<http::HeaderField>& headers) {
  std::string key;
  key.reserve(util::Between(req.id, 4, design::kCacheKeyBytes));
  char prefix[48];
  key.append(prefix, size_t(std::snprintf(prefix, sizeof prefix, "GET|%" PRIx64 "|", req.route)));
  for (const http::HeaderField& f : headers) {  // vary on every header, normalized
    if (key.size() + f.name_len + f.value_len + 2 > key.capacity()) break;
    key.append(f.name, f.name_len).append("=").append(f.value, f.value_len).append(";");
  }
  key.append(key.capacity() - key.size(), '.');  // pad to the reserved size: no regrowth
  return key;
}

#if PROXY_V2
CacheEntry* ResponseCache::AllocateSlot(size_t payload_bytes) {
  void* block = proxy::mem::Pool<ResponseCache>::Take(sizeof(CacheEntry) + payload_bytes);
  auto* e = new (block) CacheEntry;
  e->payload_bytes = payload_bytes;
  return e;
}
#endif

void ResponseCache::PX(Insert, Put)(const http::ParsedRequest& req,
                                     const std::vector<http::HeaderField>& headers,
                                     const std::vector<char>& body) {
  const size_t payload = util::Between(req.id, 5, design::kCachePayloadBytes);
#if PROXY_V2
  CacheEntry* e = AllocateSlot(payload);
#else
  void* block = std::malloc(sizeof(CacheEntry) + payload);
  if (block == nullptr) std::abort();
  auto* e = new (block) CacheEntry;
  e->payload_bytes = payload;
#endif
  e->route = req.route;
  e->key = PX(MakeCacheKey, KeyBuilder::MakeCacheKey)(req, headers);
  for (size_t off = 0; off < payload; off += body.size())
    std::memcpy(e->payload() + off, body.data(), std::min(body.size(), payload - off));
  e->deadline_ns = util::NowNs() + util::LifetimeNs(req.id, 22, design::kCacheTtlMs);
  wheel.Schedule(e);
  run::g.cache_entries.fetch_add(1, std::memory_order_relaxed);
}

void Evictor::Evict(CacheEntry* e) {
  e->~CacheEntry();  // frees the key
  std::free(e);
}

void Evictor::Run() {
  util::EveryPeriod(5'000'000, run::g.stop_sweepers, [](int64_t now) {
    for (CacheEntry* e = CacheT::wheel.CollectDue(now); e != nullptr;) {
      CacheEntry* next = e->next;
      Evict(e);
      e = next;
    }
  });
}
}  // namespace proxy::cache

// ============================================================== sessions
namespace proxy::session {

util::TimerWheel<SessionT, 512> SessionTable::wheel{20'000'000};

void SessionT::RestoreState(size_t bytes) {
  state.resize(bytes);  // zero-filled
  for (size_t i = 0; i < bytes; i += 4096) state[i] = uint8_t(user + i);
}

SessionT* SessionTable::PX(Open, Create)(const http::ParsedRequest& req) {
  auto* s = new SessionT;
  s->user = req.connection;
  std::snprintf(s->cookie_jar, sizeof s->cookie_jar, "sid=%016" PRIx64, util::Mix(req.id));
  s->RestoreState(util::Between(req.id, 6, design::kSessionStateBytes));
  s->deadline_ns = util::NowNs() + util::LifetimeNs(req.id, 23, design::kSessionTtlMs);
  wheel.Schedule(s);
  run::g.sessions.fetch_add(1, std::memory_order_relaxed);
  return s;
}

void Janitor::Expire(SessionT* s) { delete s; }

void Janitor::Run() {
  util::EveryPeriod(20'000'000, run::g.stop_sweepers, [](int64_t now) {
    for (SessionT* s = SessionTable::wheel.CollectDue(now); s != nullptr;) {
      SessionT* next = s->next;
      Expire(s);
      s = next;
    }
  });
}
}  // namespace proxy::session

// ============================================================== logs
namespace PX(proxy::log, proxy::logging) {

using LogT = AccessLog;
std::mutex LogT::mu;
LogRecord* LogT::head = nullptr;

#if PROXY_V2
LogRecord* AccessLog::NewRecord(size_t text_bytes) {
  auto* r = static_cast<LogRecord*>(proxy::mem::Pool<AccessLog>::Take(sizeof(LogRecord) +
                                                                     text_bytes));
  r->bytes = text_bytes;
  return r;
}
#endif

void LogT::PX(Append, Record)(const http::ParsedRequest& req,
                              const std::vector<http::HeaderField>& headers) {
  const size_t bytes = util::Between(req.id, 7, design::kLogRecordBytes);
#if PROXY_V2
  LogRecord* r = NewRecord(bytes);
#else
  auto* r = static_cast<LogRecord*>(std::malloc(sizeof(LogRecord) + bytes));
  if (r == nullptr) std::abort();
  r->bytes = bytes;
#endif
  r->id = req.id;
  int n = std::snprintf(r->text(), bytes, "req=%" PRIu64 " route=%" PRIx64 " hdrs=%d body=%zu",
                        req.id, req.route, req.header_count, req.body_bytes);
  for (const http::HeaderField& f : headers) {  // the trace keeps every header
    if (size_t(n) + f.name_len + f.value_len + 4 >= bytes) break;
    n += std::snprintf(r->text() + n, bytes - size_t(n), " %s=%s", f.name, f.value);
  }
  std::memset(r->text() + n, ' ', bytes - size_t(n));
  std::lock_guard<std::mutex> lock(mu);
  r->next = head;
  head = r;
  run::g.log_records.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace PX(proxy::log, proxy::logging)

// ============================================================== main
namespace {

void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--seconds S] [--threads N] [--rate R] [--no-drain]\n"
               "  --seconds S   total run time (default 12)\n"
               "  --threads N   worker threads (default 2)\n"
               "  --rate R      requests per second (default 2000)\n"
               "  --no-drain    exit without waiting for TTL'd objects to expire; they are\n"
               "                still live at exit (censored samples in a profile)\n",
               argv0);
}

bool ParseArgs(int argc, char** argv, run::Config* c) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    } else if (arg != "--no-drain" && arg != "--help" && i + 1 < argc) {
      value = argv[++i];
    }
    char* end = nullptr;
    if (arg == "--seconds") {
      c->seconds = std::strtod(value.c_str(), &end);
      if (*end || !(c->seconds > 0)) return false;
    } else if (arg == "--threads") {
      c->threads = int(std::strtol(value.c_str(), &end, 10));
      if (*end || c->threads < 1 || c->threads > 64) return false;
    } else if (arg == "--rate") {
      c->rate = std::strtod(value.c_str(), &end);
      if (*end || !(c->rate > 0)) return false;
    } else if (arg == "--no-drain") {
      c->drain = false;
    } else {
      return false;
    }
  }
  return true;
}

net::RequestQueue g_queue;

}  // namespace

int main(int argc, char** argv) {
  run::State& g = run::g;
  if (!ParseArgs(argc, argv, &g.config)) {
    Usage(argv[0]);
    return 2;
  }
  g.start_ns = util::NowNs();
  g.end_ns = g.start_ns + int64_t(g.config.seconds * 1e9);
  g.listen_until_ns = std::max(g.start_ns + 100'000'000, g.end_ns - design::kWindDownNs);
  upstream::Responder::wheel.Start(g.start_ns);
  cache::ResponseCache::wheel.Start(g.start_ns);
  session::SessionTable::wheel.Start(g.start_ns);

  std::vector<std::thread> sweepers, workers;
  sweepers.emplace_back(upstream::Responder::Run);
  sweepers.emplace_back(cache::Evictor::Run);
  sweepers.emplace_back(session::Janitor::Run);
  for (int i = 0; i < g.config.threads; ++i)
    workers.emplace_back(core::Worker::PX(Run, Serve), &g_queue);
  std::thread listener(net::Listener::Run, &g_queue);

  listener.join();
  for (std::thread& t : workers) t.join();
  if (g.config.drain) {  // let every TTL'd object expire on its own schedule
    const int64_t give_up = util::NowNs() + 10'000'000'000;
    while ((upstream::Responder::wheel.size() ||
            cache::ResponseCache::wheel.size() ||
            session::SessionTable::wheel.size()) &&
           util::NowNs() < give_up)
      util::SleepUntil(util::NowNs() + 10'000'000);
  }
  g.stop_sweepers.store(true, std::memory_order_release);
  for (std::thread& t : sweepers) t.join();

  std::printf("%s: %.2f s, %" PRIu64 " requests (%" PRIu64 " dropped), %" PRIu64
              " cache entries, %" PRIu64 " sessions, %" PRIu64 " log records, %" PRIu64
              " connections, drain=%s\n",
              PX("proxy_server_v1", "proxy_server_v2"), double(util::NowNs() - g.start_ns) / 1e9,
              g.requests.load(), g.dropped.load(), g.cache_entries.load(), g.sessions.load(),
              g.log_records.load(), g.connections.load(), g.config.drain ? "yes" : "no");
  return 0;
}
