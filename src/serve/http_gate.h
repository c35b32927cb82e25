// serve/http_gate.h — an httplib::Server whose request threads never wait for a client.
//
// httplib hands each accepted connection to a thread, which then reads the request head one read()
// at a time, each with its own timeout: a client that sends a header line every few seconds (a
// slow-loris) holds the thread forever, and a few such clients hold them all. Here the connections
// wait in one gate thread instead (poll over all of them) until their whole head has arrived, then
// go to a thread with the head already buffered; a kept-alive connection goes back to the gate after
// each response. A head that does not arrive in time is answered 408 and closed, an oversized one 431.
// Bodies and responses are read and written by the request threads, with a minimum average rate:
// counted over the time spent waiting on the client, so a slow model does not count against it.
//
// Only http_server.cpp includes this (it pulls in httplib.h).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>

namespace kiln::serve {

struct GateLimits {
  // A request head must be received whole within this of its first byte (else 408), and a
  // connection that sends nothing (new, or kept alive after a response) is closed after it, silently.
  std::chrono::milliseconds head_timeout{10000};
  size_t max_head_bytes = size_t{16} << 10;  // request line and headers together
  // Connections waiting for a head, and connections with a head waiting for a request thread, each
  // at most this many: past it the one nearest its deadline is closed (503 if it sent anything).
  size_t max_waiting = 4096;
  // Once a request has waited on its client longer than head_timeout in all, it must have moved at
  // least this many bytes (body read plus response written) per second of that waiting, or it is cut
  // (a body trickled slower holds a request thread for about head_timeout, not for ever).
  size_t min_bytes_per_second = 4096;
  size_t threads = 256;  // requests served at once
};

class GatedServer : public httplib::Server {
 public:
  explicit GatedServer(GateLimits limits);

  // After bind_to_port/bind_to_any_port: the listening socket's accept queue to the system's maximum
  // (httplib listens with a backlog of 5: a burst of new connections had SYNs dropped and waited for
  // TCP's 1 s retransmission).
  void widen_backlog();

  class Gate;
  struct Connection;

 private:
  // Called by httplib's accept loop (through the task queue, inline) for each accepted socket.
  bool process_and_close_socket(socket_t sock) override;

  GateLimits limits_;
  std::atomic<Gate*> gate_{nullptr};  // the queue of the listen() in progress, if any
};

}  // namespace kiln::serve
