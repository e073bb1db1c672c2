// SPDX-License-Identifier: Apache-2.0
// The daemon's own Prometheus endpoint (mount option metrics=ADDR:PORT).
//
// Opt-in and loopback unless told otherwise: the stats name no files, but
// they are the host's business. The socket is bound before the mount so a
// taken port fails `kvfs` itself (exit 1), and served only once the mount is
// ready; stop() at unmount, before the store closes, so no scrape reads a
// store being torn down. cpp-httplib (Debian's libcpp-httplib) does the
// HTTP: no hand-written parser facing the network.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/util/status.h"

namespace httplib {
class Server;
}

namespace kvfs {

class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds host:port (numeric address); serves `render()` at GET /metrics.
  Status bind(const std::string& host, unsigned port, std::function<std::string()> render);
  // Accepts connections from a thread of its own.
  void start();
  // Idempotent; joins the thread.
  void stop();

 private:
  std::unique_ptr<httplib::Server> svr_;
  std::thread thread_;
  std::atomic<bool> done_{false};  // the serving thread has returned
};

}  // namespace kvfs
