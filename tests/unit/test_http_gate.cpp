// The HTTP gate (src/serve/http_gate.h) on 127.0.0.1 with raw sockets: slow and idle connections hold
// no request thread, heads and bodies have deadlines (408, 431, a trickled body cut), pipelined and
// kept-alive requests are answered in order, the waiting cap closes the oldest, and stopping neither
// waits for idle connections nor drops a request in flight.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "serve/http_gate.h"

namespace kiln::serve {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A server with GET /ok, GET /sleep (100 ms) and POST /echo, listening on a free port until destroyed.
class TestServer {
 public:
  explicit TestServer(GateLimits limits) : server_(limits) {
    server_.Get("/ok", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    server_.Get("/sleep", [this](const httplib::Request&, httplib::Response& res) {
      ++sleeping_;
      std::this_thread::sleep_for(100ms);
      res.set_content("slept", "text/plain");
    });
    server_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "text/plain");
    });
    server_.set_keep_alive_max_count(1000);
    port_ = server_.bind_to_any_port("127.0.0.1");
    EXPECT_GT(port_, 0);
    server_.widen_backlog();
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~TestServer() { stop(); }
  void stop() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  int sleeping() const { return sleeping_; }

 private:
  GatedServer server_;
  int port_ = -1;
  std::atomic<int> sleeping_{0};
  std::thread thread_;
};

class Socket {
 public:
  explicit Socket(int port, const std::string& send_now = "") : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    if (!send_now.empty()) send(send_now);
  }
  ~Socket() { ::close(fd_); }
  bool send(const std::string& s) { return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size()); }
  // What arrives within `limit`, up to the server closing the connection (closed() tells).
  std::string read_for(std::chrono::milliseconds limit, size_t stop_after = SIZE_MAX) {
    std::string got;
    const auto end = Clock::now() + limit;
    while (!closed_ && got.size() < stop_after && Clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
      if (::poll(&p, 1, std::max(left, 0)) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) closed_ = true;
      else got.append(buf, size_t(n));
    }
    return got;
  }
  // One response to a request already sent (its Content-Length body included).
  std::string response(std::chrono::milliseconds limit = 5000ms) {
    std::string got;
    const auto end = Clock::now() + limit;
    while (Clock::now() < end && !closed_) {
      const size_t head = got.find("\r\n\r\n");
      if (head != std::string::npos) {
        const size_t cl = got.find("Content-Length: ");
        const size_t len = cl == std::string::npos ? 0 : std::stoul(got.substr(cl + 16));
        if (got.size() >= head + 4 + len) return got;
      }
      got += read_for(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()), 1);
    }
    return got;
  }
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool closed_ = false;
};

const std::string kGetOk = "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";

TEST(HttpGate, SlowHeadsHoldNoRequestThread) {
  GateLimits limits;
  limits.threads = 1;
  TestServer server(limits);
  std::vector<std::unique_ptr<Socket>> slow;
  for (int i = 0; i < 8; ++i) slow.push_back(std::make_unique<Socket>(server.port(), "GET /ok HTTP/1.1\r\n"));
  for (int round = 0; round < 5; ++round) {
    for (auto& s : slow) s->send("X-Slow: " + std::to_string(round) + "\r\n");
    const auto t0 = Clock::now();
    Socket fresh(server.port(), kGetOk);
    const std::string r = fresh.response();
    EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
    EXPECT_LT(seconds_since(t0), 2.0);  // without the gate: never (until the 10 s head deadline)
  }
  // The slow ones, finished, are answered too (a kept head is served whole).
  for (auto& s : slow) s->send("\r\n");
  for (auto& s : slow) EXPECT_EQ(s->response().rfind("HTTP/1.1 200", 0), 0u);
}

TEST(HttpGate, HeadsAndBodiesHaveDeadlines) {
  GateLimits limits;
  limits.head_timeout = 300ms;
  limits.max_head_bytes = 4096;
  TestServer server(limits);
  const auto t0 = Clock::now();
  Socket partial(server.port(), "GET /ok HTTP/1.1\r\nHost: x\r\n");
  Socket silent(server.port());
  const std::string r408 = partial.read_for(5000ms);
  EXPECT_EQ(r408.rfind("HTTP/1.1 408", 0), 0u) << r408;
  EXPECT_TRUE(partial.closed());
  EXPECT_EQ(silent.read_for(5000ms), "");
  EXPECT_TRUE(silent.closed());
  EXPECT_GT(seconds_since(t0), 0.25);
  EXPECT_LT(seconds_since(t0), 3.0);

  Socket big(server.port(), "GET /ok HTTP/1.1\r\nX-Big: " + std::string(5000, 'a') + "\r\n");
  const std::string r431 = big.read_for(5000ms);
  EXPECT_EQ(r431.rfind("HTTP/1.1 431", 0), 0u) << r431;

  // A body promised at 1 MB and trickled at about 1 KiB/s: cut once it has waited 300 ms in all.
  Socket body(server.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
  const auto t1 = Clock::now();
  while (!body.closed() && seconds_since(t1) < 10) {
    body.send(std::string(64, 'b'));
    body.read_for(50ms);
  }
  EXPECT_TRUE(body.closed());
  EXPECT_LT(seconds_since(t1), 5.0);

  // A body sent at once is not affected, and the server still answers.
  Socket fast(server.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n" +
                                 std::string(200000, 'f'));
  const std::string echo = fast.response();
  EXPECT_EQ(echo.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(echo.size() - echo.find("\r\n\r\n") - 4, 200000u);
}

TEST(HttpGate, PipelinedAndKeptAliveRequestsAreAnsweredInOrder) {
  TestServer server(GateLimits{});
  Socket s(server.port(), kGetOk + "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + kGetOk);
  std::string all;
  for (const auto end = Clock::now() + 5s; Clock::now() < end;) {  // until the third response is whole
    const size_t last_ok = all.rfind("\r\n\r\nok");
    if (all.find("hello") != std::string::npos && last_ok != std::string::npos && last_ok > all.find("hello")) break;
    all += s.read_for(100ms, 1);
  }
  const size_t first = all.find("\r\n\r\nok"), echo = all.find("\r\n\r\nhello"), last = all.rfind("\r\n\r\nok");
  ASSERT_NE(first, std::string::npos) << all;
  ASSERT_NE(echo, std::string::npos) << all;
  EXPECT_LT(first, echo);
  EXPECT_LT(echo, last);
  // The connection stays open: a request split over writes (back in the gate between them) is served.
  s.send("GET /ok HTT");
  std::this_thread::sleep_for(50ms);
  s.send("P/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(s.response().rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_FALSE(s.closed());
}

TEST(HttpGate, AKeptAliveHeadGetsItsWholeDeadlineAfterIdling) {
  GateLimits limits;
  limits.head_timeout = 1000ms;
  TestServer server(limits);
  Socket s(server.port(), kGetOk);
  EXPECT_EQ(s.response().rfind("HTTP/1.1 200", 0), 0u);
  std::this_thread::sleep_for(700ms);  // idle most of the timeout, then a head in two writes 500 ms apart
  s.send("GET /ok HTTP/1.1\r\n");
  std::this_thread::sleep_for(500ms);
  s.send("Host: x\r\n\r\n");
  const std::string r = s.response();
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
}

TEST(HttpGate, AClientAboveTheRateFloorIsNotCut) {
  GateLimits limits;
  limits.head_timeout = 200ms;  // the floor applies after 200 ms of waiting on the client
  limits.min_bytes_per_second = 64 << 10;
  TestServer server(limits);
  // 512 KiB sent at about 512 KiB/s (8 KiB every 15 ms): a second, well past the grace, above the floor.
  const size_t total = 512 << 10;
  Socket s(server.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(total) + "\r\n\r\n");
  for (size_t sent = 0; sent < total; sent += 8192) {
    ASSERT_TRUE(s.send(std::string(8192, 'u')));
    std::this_thread::sleep_for(15ms);
  }
  const std::string r = s.response();
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r.substr(0, 100);
  EXPECT_EQ(r.size() - r.find("\r\n\r\n") - 4, total);
}

TEST(HttpGate, WaitingCapClosesTheOldest) {
  GateLimits limits;
  limits.max_waiting = 4;
  TestServer server(limits);
  std::vector<std::unique_ptr<Socket>> waiting;
  for (int i = 0; i < 6; ++i) {
    waiting.push_back(std::make_unique<Socket>(server.port(), "GET /ok"));
    std::this_thread::sleep_for(50ms);  // accepted, and their first bytes seen, in this order
  }
  EXPECT_EQ(waiting[0]->read_for(2000ms).rfind("HTTP/1.1 503", 0), 0u);
  EXPECT_EQ(waiting[1]->read_for(2000ms).rfind("HTTP/1.1 503", 0), 0u);
  for (int i = 2; i < 6; ++i) {
    waiting[size_t(i)]->send(" HTTP/1.1\r\n\r\n");
    EXPECT_EQ(waiting[size_t(i)]->response().rfind("HTTP/1.1 200", 0), 0u) << i;
  }
}

TEST(HttpGate, StopAnswersRequestsInFlightAndDoesNotWaitForIdleOnes) {
  auto server = std::make_unique<TestServer>(GateLimits{});
  std::vector<std::unique_ptr<Socket>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<Socket>(server->port(), kGetOk));
    EXPECT_EQ(idle.back()->response().rfind("HTTP/1.1 200", 0), 0u);
  }
  Socket busy(server->port(), "GET /sleep HTTP/1.1\r\nHost: x\r\n\r\n");
  while (server->sleeping() == 0) std::this_thread::sleep_for(1ms);
  const auto t0 = Clock::now();
  server->stop();
  EXPECT_LT(seconds_since(t0), 1.0);
  const std::string r = busy.response();
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  for (auto& s : idle) {
    s->read_for(1000ms);
    EXPECT_TRUE(s->closed());
  }
}

}  // namespace
}  // namespace kiln::serve
