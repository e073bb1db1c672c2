// SPDX-License-Identifier: Apache-2.0
// The one place a core Status becomes an errno (the FUSE edge).
#pragma once

#include "core/util/status.h"

namespace kvfs {

int to_errno(const Status& s);

}  // namespace kvfs
