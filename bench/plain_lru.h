// SPDX-License-Identifier: Apache-2.0
// PlainLru: least-recently-used over block keys, the reference the RAM
// tier's policies are compared with (kvfs-core-bench scan, mrqa-tier).
// Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>

namespace kvfs::bench {

class PlainLru {
 public:
  explicit PlainLru(size_t cap) : cap_(cap) {}
  bool access(uint64_t k) {
    auto it = map_.find(k);
    if (it != map_.end()) {
      list_.splice(list_.begin(), list_, it->second);
      return true;
    }
    list_.push_front(k);
    map_[k] = list_.begin();
    if (list_.size() > cap_) {
      map_.erase(list_.back());
      list_.pop_back();
    }
    return false;
  }

 private:
  size_t cap_;
  std::list<uint64_t> list_;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> map_;
};

}  // namespace kvfs::bench
