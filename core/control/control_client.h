// SPDX-License-Identifier: Apache-2.0
// The client side of the control protocol: how kvfs-admin, bench/ and the
// tests talk to a mounted kvfs. The daemon's side is fs/control.h; this
// header is the one place that says what the protocol is, and has no FUSE in
// it so that any client can use it.
//
// The protocol: a hidden regular file, kControlName, at the mount root. A
// client opens it O_RDWR, writes one JSON request with one write() (the
// daemon runs each write as one request, so a request must not be split),
// then reads the JSON reply from offset 0 to end of file on the same
// descriptor: each open keeps its own reply. The daemon decides who may do
// what; a refusal is an ordinary reply, {"error": text, "errno": n}, so it is
// the caller's to interpret, not a failure of the exchange.
//
// Bounded: requests longer than kMaxRequestBytes are refused before they are
// sent (a longer write could reach the daemon as two requests), and a reply
// that grows past kMaxReplyBytes is refused instead of being read on. The
// calls block for as long as the daemon takes to answer.
//
// Thread-safe: stateless; each call opens its own descriptor.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/util/status.h"

namespace kvfs::control {

inline constexpr const char* kControlName = ".kvfs-control";
// Far above any real request (an ls path is at most PATH_MAX) and below the
// daemon's max_write, which would split a request.
inline constexpr size_t kMaxRequestBytes = 64 * 1024;
// Far above any real reply: an ls entry is ~100 bytes, so this is ten
// million of them.
inline constexpr size_t kMaxReplyBytes = size_t(1) << 30;

// MOUNT_ROOT/.kvfs-control.
std::string control_path(const std::string& mount_root);

// The control file of the kvfs mount that holds dir: the nearest control
// file at or above dir on the same device. NotFound when dir is not on kvfs.
Result<std::string> find_control(const std::string& dir);

// Sends one request (JSON text) through the control file at ctl and returns
// the reply's text. Fails with the errno's Status when the file cannot be
// opened, written or read (NotFound: no control file; Access: not allowed),
// Invalid when the request is too long, Corruption when the reply is.
Result<std::string> request_text(const std::string& ctl, std::string_view request);

// request_text(), with the reply parsed: Corruption when it is not JSON. Error
// replies are returned as they are. (A request held as json is sent as
// req.dump().)
Result<nlohmann::json> request(const std::string& ctl, std::string_view request);

}  // namespace kvfs::control
