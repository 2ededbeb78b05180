// Which process a peer is, for transports whose library does not say promptly that a peer of
// the same machine died (UCX over shared memory notices late, or not at all): each rank
// publishes its identity with its address, and a peer on the same machine (the same boot, the
// same pid namespace) is watched through a pidfd, readable once its process has ended.
//
// And the words a rank leaves for the peers of its machine, readable after it has gone: why it
// gave up (an abort's reason, the call it failed), for transports that lose what was still in
// flight when a process ends (UCX's shared memory keeps messages in the sender's memory). A
// page of its own memory (a memfd) that its peers map through pidfd_getfd at setup; where the
// kernel refuses that (no ptrace permission between the ranks) there are no last words, only
// the death.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/base/socket.hpp"

namespace arcoll::transport {

// "<boot id> <pid namespace> <pid>": this process, as published.
std::string this_process_identity();

// A pidfd of the process `identity` names when it runs on this machine in this pid namespace,
// else an invalid Fd (also when it cannot be had: the process is gone already, or pidfds are
// not supported).
net::Fd watch_if_local(const std::string& identity);

// Whether the process behind `pidfd` has ended (false for an invalid Fd).
bool has_ended(const net::Fd& pidfd);

class LastWords {
 public:
  explicit LastWords(int world_size);
  ~LastWords();
  LastWords(const LastWords&) = delete;
  LastWords& operator=(const LastWords&) = delete;

  // What peers need to read this rank's words: this_process_identity() and the page.
  std::string identity() const;
  // The words of `peer`, whose identity() is `identity`, become readable (same machine only).
  void watch(int peer, const std::string& identity);
  // This rank gives up for `reason` from collective `failed_call`.
  void say(const std::string& reason, std::uint64_t failed_call) noexcept;
  struct Words {
    std::string reason;
    std::uint64_t failed_call = 0;
  };
  std::optional<Words> of(int peer) const;

 private:
  net::Fd memfd_;
  void* own_ = nullptr;
  std::vector<void*> peers_;  // their pages, mapped; null where none
};

}  // namespace arcoll::transport
