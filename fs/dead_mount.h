// SPDX-License-Identifier: Apache-2.0
// A kvfs killed with SIGKILL leaves a dead FUSE mount (ENOTCONN) on its
// mount point: kvfs, mount(8) (through mount.fuse3) and a restarted
// kvfs.service must mount there again without a person.
//
// A dead mount of the same backing dir, whose daemon no longer holds the
// backing dir's lock, is lazily unmounted (umount2 MNT_DETACH as root, else
// fusermount3 -u -z) and said in the log; any other mount is left alone and
// the message names the command that clears it. Called once at startup,
// before anything is opened; not thread-safe.
#pragma once

#include <string>

namespace kvfs {

// True to go on (nothing dead was there, or what was is cleared: *cleared
// then says what happened, for the log); false after a message on stderr
// (the mount cannot go on: exit status 3).
bool clear_dead_mount(const std::string& backing, const std::string& mnt, std::string* cleared);

}  // namespace kvfs
