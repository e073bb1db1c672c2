// SPDX-License-Identifier: Apache-2.0
#include "fs/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/util/log.h"

namespace kvfs {

MetricsServer::MetricsServer() = default;
MetricsServer::~MetricsServer() {
  stop();
}

Status MetricsServer::bind(const std::string& host, unsigned port,
                           std::function<std::string()> render) {
  svr_ = std::make_unique<httplib::Server>();
  // Two threads: scrapes come every few seconds from one or two Prometheus
  // servers; httplib's default pool (one per core, at least 8) is waste.
  svr_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  // A client that connects and sends nothing must not hold a thread for long.
  svr_->set_read_timeout(5, 0);
  // httplib's default also sets SO_REUSEPORT, which would let a second kvfs
  // share the port and answer every other scrape with its own numbers.
  svr_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  svr_->set_write_timeout(5, 0);
  svr_->Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  svr_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("kvfs: metrics at /metrics\n", "text/plain");
  });
  errno = 0;
  if (!svr_->bind_to_port(host, static_cast<int>(port))) {
    const int e = errno;
    svr_.reset();
    return Status::Invalid("cannot listen for metrics on " + host + ":" + std::to_string(port) +
                           (e ? std::string(": ") + std::strerror(e) : std::string()));
  }
  return Status::OK();
}

void MetricsServer::start() {
  if (!svr_) return;
  thread_ = std::thread([this] {
    if (!svr_->listen_after_bind()) spdlog::error("metrics: the HTTP server stopped unexpectedly");
    done_ = true;
  });
}

void MetricsServer::stop() {
  if (!svr_) return;
  // httplib's stop() does nothing until listen_after_bind() is running: an
  // unmount right after the mount would otherwise join a thread that never
  // ends.
  while (thread_.joinable() && !done_ && !svr_->is_running())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  svr_->stop();
  if (thread_.joinable()) thread_.join();
  svr_.reset();
}

}  // namespace kvfs
