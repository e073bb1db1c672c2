// SPDX-License-Identifier: Apache-2.0
// One runtime option of a BlockStore changed, the rest kept, through its one
// runtime setter (StoreAdmin::reconfigure), as `kvfs-admin config K=V` does.
#pragma once

#include "core/store/block_store.h"

namespace kvfs {

template <typename T, typename V>
Status reconfigure_one(BlockStore& store, T StoreConfig::*field, V value) {
  StoreConfig c = store.admin().live_config();
  c.*field = static_cast<T>(value);
  return store.admin().reconfigure(c);
}

}  // namespace kvfs
