// Which process a peer is, for transports whose library does not say promptly that a peer of
// the same machine died (UCX over shared memory notices late, or not at all): each rank
// publishes its identity with its address, and a peer on the same machine (the same boot, the
// same pid namespace) is watched through a pidfd, readable once its process has ended.
#pragma once

#include <string>

#include "base/socket.hpp"

namespace arcoll::transport {

// "<boot id> <pid namespace> <pid>": this process, as published.
std::string this_process_identity();

// A pidfd of the process `identity` names when it runs on this machine in this pid namespace,
// else an invalid Fd (also when it cannot be had: the process is gone already, or pidfds are
// not supported).
net::Fd watch_if_local(const std::string& identity);

// Whether the process behind `pidfd` has ended (false for an invalid Fd).
bool has_ended(const net::Fd& pidfd);

}  // namespace arcoll::transport
