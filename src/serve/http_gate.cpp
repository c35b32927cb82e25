// serve/http_gate.cpp — the gate thread, the buffered connection stream and the request threads
// (http_gate.h).
#include "serve/http_gate.h"

#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kiln::serve {

using Clock = std::chrono::steady_clock;

// One accepted connection: its socket and the bytes received but not yet parsed. Owned by the gate
// while it waits for a head, by one request thread while a request is served.
struct GatedServer::Connection {
  int fd = -1;
  std::string buf;  // received bytes; [pos, size) not yet consumed by a request
  size_t pos = 0;
  size_t scanned = 0;  // buf[pos, scanned) holds no "\r\n\r\n" (the gate's search resumes here)
  Clock::time_point deadline;
  size_t served = 0;  // requests answered on this connection

  explicit Connection(int f) : fd(f) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  }

  // Whether a whole head (up to the blank line) is buffered.
  bool has_head() {
    const size_t from = std::max(pos, scanned >= 3 ? scanned - 3 : size_t{0});
    if (buf.find("\r\n\r\n", from) != std::string::npos) return true;
    scanned = buf.size();
    return false;
  }
  size_t pending_bytes() const { return buf.size() - pos; }
  // One read of what the client has sent, without waiting, appended to buf through `scratch`: the
  // bytes taken (> 0), 0 when the client closed, < 0 when nothing is there (errno EAGAIN, EWOULDBLOCK
  // or EINTR) or the socket failed. The gate calls it once per readiness event, a request thread in a
  // loop after its response.
  ssize_t take_available(char* scratch, size_t size) {
    const ssize_t n = ::recv(fd, scratch, size, MSG_DONTWAIT);
    if (n > 0) buf.append(scratch, static_cast<size_t>(n));
    return n;
  }
  // Drops what the last request consumed.
  void compact() {
    buf.erase(0, pos);
    pos = 0;
    scanned = 0;
  }
  // A best-effort answer before closing (the socket may not take it; nothing waits for it).
  void reply(const char* status_line) const {
    std::string r = std::string("HTTP/1.1 ") + status_line +
                    "\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ";
    const std::string body = std::string("{\"error\":\"") + status_line + "\"}";
    r += std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)!::send(fd, r.data(), r.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
};

namespace {

int poll_one(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int r;
  do r = ::poll(&p, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  return r;
}

void numeric_address(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ip.clear();
  port = 0;
  if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
            : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return;
  ip = host;
  port = std::atoi(serv);
}

// httplib's view of a connection for one request: the gate's buffered bytes first, then the socket.
// Every wait on the client is bounded by httplib's read/write timeouts and counted for the rate floor.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(GatedServer::Connection& c, int read_ms, int write_ms, const GateLimits& limits)
      : c_(c), read_ms_(read_ms), write_ms_(write_ms), limits_(limits) {}

  bool is_readable() const override { return c_.pending_bytes() > 0 || wait(POLLIN, read_ms_); }
  bool is_writable() const override { return wait(POLLOUT, write_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    while (c_.pending_bytes() == 0) {
      if (too_slow() || !wait(POLLIN, read_ms_)) return -1;
      // Large reads (bodies) go straight to the caller; small ones (line by line) refill the buffer.
      const bool direct = size >= kRefill;
      if (!direct) {
        c_.compact();
        c_.buf.resize(kRefill);
      }
      const ssize_t got = counted(::recv(c_.fd, direct ? ptr : c_.buf.data(), direct ? size : kRefill, MSG_DONTWAIT));
      if (!direct) c_.buf.resize(got > 0 ? static_cast<size_t>(got) : 0);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;  // woken for nothing
      if (direct || got <= 0) return got;
    }
    const size_t n = std::min(size, c_.pending_bytes());
    std::memcpy(ptr, c_.buf.data() + c_.pos, n);
    c_.pos += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      if (too_slow() || !wait(POLLOUT, write_ms_)) return -1;
      const ssize_t k = ::send(c_.fd, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return counted(k);
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { numeric_address(c_.fd, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { numeric_address(c_.fd, false, ip, port); }
  socket_t socket() const override { return c_.fd; }

 private:
  static constexpr size_t kRefill = 16384;

  bool wait(short events, int timeout_ms) const {
    const auto t0 = Clock::now();
    const int r = poll_one(c_.fd, events, timeout_ms);
    waited_ += Clock::now() - t0;
    return r > 0;
  }
  ssize_t counted(ssize_t n) {
    if (n > 0) moved_ += static_cast<size_t>(n);
    return n;
  }
  // After head_timeout of waiting on the client, the bytes moved must keep up with the rate floor.
  bool too_slow() const {
    const double waited = std::chrono::duration<double>(waited_).count();
    return waited > std::chrono::duration<double>(limits_.head_timeout).count() &&
           static_cast<double>(moved_) < static_cast<double>(limits_.min_bytes_per_second) * waited;
  }

  GatedServer::Connection& c_;
  const int read_ms_, write_ms_;
  const GateLimits& limits_;
  size_t moved_ = 0;
  mutable Clock::duration waited_{};
};

}  // namespace

// httplib's task queue for one listen(): enqueue() runs the accept loop's closure inline (it only
// calls process_and_close_socket, which hands the socket over here), one thread waits for heads
// (epoll over the waiting sockets, their deadlines in order), and a pool of request threads serves them.
class GatedServer::Gate final : public httplib::TaskQueue {
 public:
  explicit Gate(GatedServer& server)
      : server_(server), pool_(std::max<size_t>(1, server.limits_.threads)),
        wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
    if (wake_ >= 0 && epoll_ >= 0) {
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.fd = wake_;
      ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &e);
    }
    thread_ = std::thread([this] { loop(); });
  }
  ~Gate() override {
    shutdown();
    if (wake_ >= 0) ::close(wake_);
    if (epoll_ >= 0) ::close(epoll_);
    Gate* self = this;
    server_.gate_.compare_exchange_strong(self, nullptr);
  }

  void enqueue(std::function<void()> fn) override { fn(); }

  // The accept loop has ended: close the waiting connections, let the requests in flight finish.
  void shutdown() override {
    stop_gate();
    if (!pool_stopped_) pool_.shutdown();  // joins its threads: only once
    pool_stopped_ = true;
  }

  void add(std::shared_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;  // closed by c's destructor
    incoming_.push_back(std::move(c));
    poke();
  }

 private:
  void poke() const {
    const uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
  }

  void stop_gate() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      incoming_.clear();
    }
    poke();
    if (thread_.joinable()) thread_.join();
    deadlines_.clear();
    waiting_.clear();
  }

  // ---- The gate thread's own state: waiting_ (by socket) and deadlines_ (earliest first).
  void admit(std::shared_ptr<Connection> c) {
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = c->fd;
    if (epoll_ < 0 || ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->fd, &e) != 0) return;  // closed
    deadlines_.emplace(c->deadline, c->fd);
    waiting_.emplace(c->fd, std::move(c));
  }
  std::shared_ptr<Connection> release(int fd) {
    auto it = waiting_.find(fd);
    if (it == waiting_.end()) return nullptr;
    std::shared_ptr<Connection> c = std::move(it->second);
    waiting_.erase(it);
    deadlines_.erase({c->deadline, fd});
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    return c;
  }
  void set_deadline(Connection& c, Clock::time_point t) {
    deadlines_.erase({c.deadline, c.fd});
    c.deadline = t;
    deadlines_.emplace(t, c.fd);
  }
  // A connection with its head: to a request thread, unless as many wait for one as may wait here.
  void hand_over(std::shared_ptr<Connection> c) {
    if (queued_.load() >= server_.limits_.max_waiting) return c->reply("503 Service Unavailable");
    ++queued_;
    pool_.enqueue([this, c] {
      --queued_;
      serve(c);
    });
  }

  void readable(int fd, std::vector<char>& chunk) {
    auto it = waiting_.find(fd);
    if (it == waiting_.end()) return;
    Connection& c = *it->second;
    const bool idle = c.pending_bytes() == 0;
    const ssize_t n = c.take_available(chunk.data(), chunk.size());
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {  // the client closed (or the socket failed)
      release(fd);
      return;
    }
    // An idle connection's first byte starts the head's own deadline (a kept-alive client that was
    // idle a while gets the whole head_timeout for its next head).
    if (idle) set_deadline(c, Clock::now() + server_.limits_.head_timeout);
    if (c.has_head()) return hand_over(release(fd));
    if (c.pending_bytes() > server_.limits_.max_head_bytes) release(fd)->reply("431 Request Header Fields Too Large");
  }

  void loop() {
    std::vector<char> chunk(4096);
    std::vector<epoll_event> events(256);
    for (;;) {
      std::vector<std::shared_ptr<Connection>> arrived;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        arrived.swap(incoming_);
      }
      for (auto& c : arrived) admit(std::move(c));
      // Past the cap, the connection nearest its deadline goes (answered 503 if it sent anything).
      while (waiting_.size() > server_.limits_.max_waiting) {
        auto c = release(deadlines_.begin()->second);
        if (c->pending_bytes() > 0) c->reply("503 Service Unavailable");
      }
      int timeout_ms = -1;
      if (!deadlines_.empty()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadlines_.begin()->first - Clock::now());
        timeout_ms = static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30));
      }
      if (wake_ < 0 || epoll_ < 0) timeout_ms = timeout_ms < 0 ? 20 : std::min(timeout_ms, 20);  // look often
      int n = epoll_ < 0 ? 0 : ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout_ms);
      if (n < 0) {
        if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // never spin
        n = 0;
      }
      if (epoll_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      for (int i = 0; i < n; ++i) {
        if (events[size_t(i)].data.fd == wake_) {
          uint64_t v;
          (void)!::read(wake_, &v, sizeof v);
        } else {
          readable(events[size_t(i)].data.fd, chunk);
        }
      }
      const auto now = Clock::now();
      while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
        auto c = release(deadlines_.begin()->second);
        if (c->pending_bytes() > 0) c->reply("408 Request Timeout");  // an idle one just closes
      }
    }
  }

  // A request thread: serves the buffered head, and the next ones while they have arrived too.
  void serve(std::shared_ptr<Connection> c) {
    const int read_ms = static_cast<int>(server_.read_timeout_sec_ * 1000 + server_.read_timeout_usec_ / 1000);
    const int write_ms = static_cast<int>(server_.write_timeout_sec_ * 1000 + server_.write_timeout_usec_ / 1000);
    for (;;) {
      bool last;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last = stopping_ || ++c->served >= server_.keep_alive_max_count_;
      }
      bool closed = false;
      ConnectionStream stream(*c, read_ms, write_ms, server_.limits_);
      if (!server_.process_request(stream, last, closed, nullptr) || closed || last) return;
      c->compact();
      // What the client sent meanwhile (a client that waited for the answer sends its next request
      // now): taken without waiting, so that a busy connection need not go through the gate.
      while (!c->has_head() && c->pending_bytes() <= server_.limits_.max_head_bytes) {
        char more[4096];
        const ssize_t n = c->take_available(more, sizeof more);
        if (n == 0) return;
        if (n < 0) break;
      }
      if (!c->has_head()) {
        c->deadline = Clock::now() + server_.limits_.head_timeout;
        add(std::move(c));
        return;
      }
    }
  }

  GatedServer& server_;
  httplib::ThreadPool pool_;
  const int wake_, epoll_;
  std::mutex mu_;
  bool stopping_ = false;                              // under mu_
  std::vector<std::shared_ptr<Connection>> incoming_;  // under mu_: handed over, not yet admitted
  std::unordered_map<int, std::shared_ptr<Connection>> waiting_;
  std::set<std::pair<Clock::time_point, int>> deadlines_;
  std::atomic<size_t> queued_{0};  // handed to the pool, not yet started
  bool pool_stopped_ = false;
  std::thread thread_;
};

GatedServer::GatedServer(GateLimits limits) : limits_(limits) {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
    limits_.max_waiting = std::max<size_t>(1, std::min<size_t>(limits_.max_waiting, files.rlim_cur / 2));
  new_task_queue = [this] {
    auto* gate = new Gate(*this);
    gate_ = gate;
    return gate;
  };
}

void GatedServer::widen_backlog() {
  const socket_t s = svr_sock_;
  if (s != INVALID_SOCKET) ::listen(s, SOMAXCONN);  // a second listen() only resizes the queue
}

bool GatedServer::process_and_close_socket(socket_t sock) {
  auto c = std::make_shared<Connection>(sock);
  c->deadline = Clock::now() + limits_.head_timeout;
  if (Gate* gate = gate_.load()) gate->add(std::move(c));
  return true;
}

}  // namespace kiln::serve
