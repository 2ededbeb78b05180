// The verbs calls the verbs transport makes, behind a small interface: an RDMA device with one
// reliable-connected queue pair per peer, memory registration, sends, RDMA writes with
// immediate, receives, and completions. Two devices implement it: the host's HCA through
// rdma-core (ibv_device.cpp), and an emulated one (emulated_device.cpp) that moves the bytes
// between processes of one host with cross-memory writes, checking bounds and keys as an HCA
// does and failing as one fails (error completions, a peer that dies), so that the protocol
// above it runs, and is tested, where no RDMA hardware is.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/base/socket.hpp"
#include "transports/common/registration.hpp"

namespace arcoll {
class StoreClient;
struct Options;
}  // namespace arcoll

namespace arcoll::verbs {

using net::Clock;
using transport::MemoryKey;

enum class Opcode : std::uint8_t { send, write_with_imm, receive, receive_with_imm };

// How a work request ended, as ibv_wc_status says it.
enum class Status : std::uint8_t {
  ok,
  flushed,         // the queue pair went to error before it ran (IBV_WC_WR_FLUSH_ERR)
  retry_exceeded,  // the peer stopped answering (IBV_WC_RETRY_EXC_ERR, RNR_RETRY_EXC_ERR)
  remote_access,   // the peer refused the write: a wrong, stale or out-of-bounds key
  remote_invalid,  // the peer could not take the message (too long for its receive)
  local_error,     // a local key or length was wrong
  other,
};
const char* to_string(Status status);

struct Completion {
  std::uint64_t wr_id = 0;
  int peer = -1;
  Opcode opcode = Opcode::send;
  Status status = Status::ok;
  std::uint32_t bytes = 0;  // receives: what arrived
  std::uint32_t imm = 0;    // receive_with_imm
};

// Local memory a work request reads or fills.
struct Segment {
  const void* address = nullptr;
  std::uint32_t bytes = 0;
  std::uint32_t lkey = 0;
};

struct DeviceSetup {
  int rank = 0;
  int size = 1;
  std::vector<int> peers;
  StoreClient* store = nullptr;
  const Options* options = nullptr;
  std::uint64_t job_id = 0;
  Clock::time_point deadline;
};

class Device {
 public:
  virtual ~Device() = default;
  // "mlx5_0 port 1, RoCE v2, GID index 3", "emulated": for logs and errors.
  virtual std::string describe() const = 0;

  virtual MemoryKey register_memory(void* address, std::size_t bytes) = 0;
  virtual void deregister_memory(const MemoryKey& key) = 0;

  // What `peer` needs to connect its queue pair to ours (LID, GID, QPN, PSN: published through
  // the store), and connecting ours to the peer's.
  virtual std::string local_address(int peer) const = 0;
  virtual void connect(int peer, const std::string& remote) = 0;

  virtual void post_receive(int peer, std::uint64_t wr_id, const Segment& into) = 0;
  virtual void post_send(int peer, std::uint64_t wr_id, const Segment& from) = 0;
  virtual void post_write_with_imm(int peer, std::uint64_t wr_id, const Segment& from,
                                   std::uint64_t remote_address, std::uint32_t rkey,
                                   std::uint32_t imm) = 0;
  // Completions now, without waiting: how many were written to `out`.
  virtual std::size_t poll(std::span<Completion> out) = 0;
  // Sleeps until a completion may be there, `until` at the latest (the completion channel's
  // event, or the emulated device's doorbell).
  virtual void wait(Clock::time_point until) = 0;
  // Makes a wait() in another thread return (thread-safe).
  virtual void wake() noexcept = 0;
};

// The emulated device when ARCOLL_VERBS_DEVICE=emulated, else the host's HCA (ARCOLL_IB_HCA
// names it, "mlx5_0" or "mlx5_0:1"; ARCOLL_IB_GID_INDEX its GID). ConfigurationError at once,
// saying why, where there is none.
std::unique_ptr<Device> open_device(const DeviceSetup& setup);
// Whether the host has an RDMA device (routing prefers verbs across hosts then).
bool has_rdma_device();

std::unique_ptr<Device> open_emulated_device(const DeviceSetup& setup);
std::unique_ptr<Device> open_hca(const DeviceSetup& setup);

}  // namespace arcoll::verbs
