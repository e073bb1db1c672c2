// SPDX-License-Identifier: Apache-2.0
#include "bench/mrqa_schedule.h"

#include <algorithm>

namespace kvfs::bench {

std::vector<Request> schedule(const Workload& w) {
  struct Session {
    uint32_t id;
    uint64_t qid = 0, history = 0;
    double last = -1;
    bool has_last = false;
  };
  const double gap_req = w.users / w.qps;
  const double alive = gap_req * (w.rounds - 1);
  const double gap_users = alive / w.users;
  std::vector<Request> out;
  std::vector<Session> sessions;
  uint32_t next_id = 0;
  double last_join = -1e18;
  const uint64_t steps = static_cast<uint64_t>(w.time / 0.1);
  for (uint64_t k = 0; k <= steps; ++k) {
    const double t = k * 0.1;
    if (k == 0) {  // _ramp_up: users already part-way through their sessions
      for (uint64_t i = 0; i < w.users; ++i) {
        Session s{++next_id};
        const double offset = w.users * gap_users - i * gap_users;
        if (offset >= 0) {
          const uint64_t passed = static_cast<uint64_t>(offset / gap_req) + 1;
          s.last = t - offset + (passed - 1) * gap_req;
          s.has_last = true;
          s.qid = passed;
        }
        sessions.push_back(s);
        if (offset < 0) break;
      }
    }
    if (t - last_join > gap_users) {
      sessions.push_back(Session{++next_id});
      last_join = t;
    }
    for (auto& s : sessions) {
      if (s.qid >= w.rounds) continue;
      if (s.has_last && !(t - s.last > gap_req)) continue;
      ++s.qid;
      s.history += s.history == 0 ? w.sys + w.ctx + w.question : w.question;
      out.push_back({s.id, static_cast<uint32_t>(s.qid), s.history});
      s.history += w.answer;
      s.last = t, s.has_last = true;
    }
    std::erase_if(sessions, [&](const Session& s) { return s.qid >= w.rounds; });
  }
  return out;
}

}  // namespace kvfs::bench
