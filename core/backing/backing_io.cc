// SPDX-License-Identifier: Apache-2.0
#include "core/backing/backing_io.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

namespace kvfs {
namespace {

// More queued calls than this while every I/O thread is stuck: the backing
// dir is not answering, and a longer queue only delays the EIO.
constexpr size_t kMaxQueued = 4096;

double seconds(BackingIo::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

BackingIo::Clock::duration to_duration(double s) {
  return std::chrono::duration_cast<BackingIo::Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

struct BackingIo::State {
  struct Job {
    std::function<Status()> fn;
    std::string what;
    uint64_t id = 0;  // in calls from its submission: the caller's deadline runs from there
    std::mutex mu;
    std::condition_variable cv;  // guarded by mu
    bool done = false;           // guarded by mu
    bool abandoned = false;      // guarded by mu: the caller stopped waiting
    Status st;                   // guarded by mu
  };

  State(double t, unsigned n) : timeout_s(t), max_threads(n) {}
  void worker();
  void monitor();
  // The oldest call in flight. Requires mu.
  const std::pair<Clock::time_point, std::string>* oldest_locked() const {
    const std::pair<Clock::time_point, std::string>* o = nullptr;
    for (auto& [id, c] : calls)
      if (!o || c.first < o->first) o = &c;
    return o;
  }
  // Whether the backing dir is stalled now; logs and counts a change. Every
  // look (the monitor's tick, a client's) goes through here, so that a stall
  // a client saw is always logged, however short. Requires mu.
  bool observe_locked(Clock::time_point now) {
    const auto* o = oldest_locked();
    const double t = timeout_s.load();
    const bool stuck = o && now - o->first >= to_duration(t);
    if (stuck && !stalled.load()) {
      stalled = true;
      stalls.fetch_add(1);
      stall_start = o->first;
      spdlog::error(
          "backing dir stalled: {} has not returned for {:.1f} s (io_timeout {} s); reads that "
          "need it fail with EIO, writes go on into RAM",
          o->second, seconds(now - o->first), t);
    } else if (!stuck && stalled.load()) {
      stalled = false;
      const double d = seconds(now - stall_start);
      stalled_total_s += d;
      spdlog::warn("backing dir answers again after a stall of {:.1f} s; flushing resumes", d);
    }
    return stuck;
  }
  uint64_t begin_locked(std::string what) {
    const uint64_t id = next_id++;
    calls.emplace(id, std::make_pair(Clock::now(), std::move(what)));
    return id;
  }

  std::atomic<double> timeout_s;
  const unsigned max_threads;
  std::mutex mu;
  std::condition_variable work_cv;        // guarded by mu: jobs grew, or stop
  std::condition_variable monitor_cv;     // guarded by mu: stop
  std::deque<std::shared_ptr<Job>> jobs;  // guarded by mu
  unsigned threads = 0, idle = 0;         // guarded by mu
  bool stop = false;                      // guarded by mu
  uint64_t next_id = 1;                   // guarded by mu
  // Backing calls in flight: start time and what they are. Few at a time
  // (I/O threads plus flushers), so a map scan is cheap.
  std::map<uint64_t, std::pair<Clock::time_point, std::string>> calls;  // guarded by mu
  Clock::time_point stall_start;                                        // guarded by mu
  double stalled_total_s = 0;        // guarded by mu: ended stalls
  std::atomic<bool> stalled{false};  // as last logged (observe_locked)
  std::atomic<uint64_t> stalls{0}, timeouts{0}, abandoned{0};
};

void BackingIo::State::worker() {
  std::unique_lock l(mu);
  for (;;) {
    ++idle;
    work_cv.wait(l, [&] { return stop || !jobs.empty(); });
    --idle;
    if (jobs.empty()) break;  // stopping
    std::shared_ptr<Job> job = std::move(jobs.front());
    jobs.pop_front();
    {
      std::lock_guard g(job->mu);
      if (job->abandoned) {  // its caller gave up while it queued
        abandoned.fetch_sub(1);
        calls.erase(job->id);
        continue;
      }
    }
    l.unlock();
    Status st = job->fn();
    job->fn = nullptr;  // drops what the call held (buffers, files) now
    l.lock();
    calls.erase(job->id);
    std::lock_guard g(job->mu);
    job->st = std::move(st);
    job->done = true;
    if (job->abandoned) abandoned.fetch_sub(1);
    job->cv.notify_all();
  }
  --threads;
}

void BackingIo::State::monitor() {
  std::unique_lock l(mu);
  while (!stop) {
    const double t = timeout_s.load();
    monitor_cv.wait_for(l, to_duration(std::clamp(t / 4, 0.05, 1.0)));
    if (stop) break;
    (void)observe_locked(Clock::now());
  }
}

BackingIo::BackingIo(double timeout_s, unsigned threads)
    : s_(std::make_shared<State>(timeout_s, std::max(1u, threads))) {
  monitor_ = std::thread([s = s_] { s->monitor(); });
}

BackingIo::~BackingIo() {
  stop();
}

void BackingIo::stop() {
  {
    std::lock_guard l(s_->mu);
    s_->stop = true;
  }
  s_->work_cv.notify_all();
  s_->monitor_cv.notify_all();
  if (monitor_.joinable()) monitor_.join();
  // I/O threads hold the state themselves: an idle one exits now, one stuck
  // in a backing call exits when the call returns (or with the process).
}

Status BackingIo::run(const std::string& what, std::function<Status()> fn) {
  auto job = std::make_shared<State::Job>();
  job->fn = std::move(fn);
  job->what = what;
  {
    std::lock_guard l(s_->mu);
    if (s_->stop) return Status::IOError(what + ": the store is closing");
    if (s_->jobs.size() >= kMaxQueued) {
      s_->timeouts.fetch_add(1);
      return Status::TimedOut(what + ": the backing dir is not answering (" +
                              std::to_string(kMaxQueued) + " calls queued)");
    }
    job->id = s_->begin_locked(what);
    s_->jobs.push_back(job);
    // One thread per queued call, up to the cap: concurrent cold reads of
    // several clients overlap, as they did on the FUSE threads.
    if (s_->idle < s_->jobs.size() && s_->threads < s_->max_threads) {
      ++s_->threads;
      std::thread([s = s_] { s->worker(); }).detach();
    }
  }
  s_->work_cv.notify_one();
  const double t = timeout();
  std::unique_lock jl(job->mu);
  if (job->cv.wait_for(jl, to_duration(t), [&] { return job->done; })) return std::move(job->st);
  job->abandoned = true;
  s_->abandoned.fetch_add(1);  // before the worker can see it and count it back
  jl.unlock();
  s_->timeouts.fetch_add(1);
  {
    std::lock_guard l(s_->mu);
    (void)s_->observe_locked(Clock::now());
  }
  return Status::TimedOut(what + ": no answer from the backing dir within io_timeout (" +
                          std::to_string(static_cast<int>(std::ceil(t))) + " s)");
}

BackingIo::Op::~Op() {
  if (io_) io_->end(id_);
}

BackingIo::Op BackingIo::track(std::string what) {
  std::lock_guard l(s_->mu);
  return Op(this, s_->begin_locked(std::move(what)));
}

void BackingIo::end(uint64_t id) {
  std::lock_guard l(s_->mu);
  s_->calls.erase(id);
}

bool BackingIo::gave_up(Clock::time_point since) const {
  const auto now = Clock::now();
  if (now - since < to_duration(timeout())) return false;
  std::lock_guard l(s_->mu);
  return s_->observe_locked(now);
}

bool BackingIo::stalled() const {
  std::lock_guard l(s_->mu);
  return s_->observe_locked(Clock::now());
}

void BackingIo::count_timeout() {
  s_->timeouts.fetch_add(1, std::memory_order_relaxed);
}

double BackingIo::timeout() const {
  return s_->timeout_s.load();
}

void BackingIo::set_timeout(double seconds) {
  s_->timeout_s = seconds;
  s_->monitor_cv.notify_all();
}

BackingIoStats BackingIo::stats() const {
  BackingIoStats st;
  const auto now = Clock::now();
  std::lock_guard l(s_->mu);
  st.stalled = s_->observe_locked(now);  // as of now, not the monitor's last tick
  st.stalls = s_->stalls.load();
  st.stalled_seconds = s_->stalled_total_s + (st.stalled ? seconds(now - s_->stall_start) : 0);
  st.timeouts = s_->timeouts.load();
  st.in_flight = s_->calls.size();
  if (const auto* o = s_->oldest_locked()) st.oldest_s = seconds(now - o->first);
  st.abandoned = s_->abandoned.load();
  return st;
}

}  // namespace kvfs
