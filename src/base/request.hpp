// One point-to-point transfer in flight, shared by the caller that waits on it and the
// transport that moves its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "arcoll/error.hpp"
#include "arcoll/types.hpp"

namespace arcoll {

struct DeviceMemoryInfo;

// Every member has an initializer: requests are remade by default-initialisation
// (Engine::fresh_request).
struct Request {
  enum class Kind : std::uint8_t { send, recv };

  Kind kind = Kind::send;
  int peer = 0;
  std::uint32_t tag = 0;
  // The collective call this message belongs to (call_signature.hpp), 0 for point-to-point;
  // carried in the message header, compared by the receive that takes it.
  std::uint64_t signature = 0;
  void* buffer = nullptr;  // const for sends
  std::size_t bytes = 0;
  // The kind of device memory `buffer` (and a landing's `with`) lies in
  // (src/base/device_memory.hpp), null for host memory: only that kind's operations may touch
  // it, and only a transport that takes() the kind is given such a request. It never narrows.
  const DeviceMemoryInfo* memory = nullptr;
  // A receive whose message is combined into `buffer` as it lands instead of copied as it is
  // (transports/common/landing.hpp): reduced element-wise with `with`, buffer[i] = with[i] op
  // message[i] (`with` may be `buffer`; null: no reduction), and widened from the 16-bit wire
  // format `wire` to the buffer's f32 elements when `wire` differs from `type`. `bytes` counts
  // the message, which is half the buffer when widened.
  struct Landing {
    const void* with = nullptr;
    DataType type = DataType::f32;
    ReduceOp op = ReduceOp::sum;
    DataType wire = DataType::f32;
  };
  std::optional<Landing> landing;
  // What the receivers of a send's call do with what lands, by which a transport chooses how
  // to move it.
  enum class Receivers : std::uint8_t {
    copy,         // keep it (scatter, sends)
    exchanged,    // keep it, where every rank sends and receives at once (all-gather,
                  // all-to-all, send/recv both ways): no sender is left idle to share a copy
    gathered,     // keep it, where every sender only sends in the call (gather): a sender that
                  // is done at once goes on while its receiver takes the messages in turn
    pipelined,    // reduce it as it lands (the reductions)
    kept_by_one,  // broadcast on 2 ranks: the root's one message, which its receiver keeps
    relayed,      // broadcast on more than 2 ranks: passed on down a chain, each but the last
                  // (kept where it comes straight from the root: LinkCost::fans_out)
  };
  Receivers receivers = Receivers::copy;
  // A receive of a collective on a buffer larger than the caches (Options::streaming_bytes,
  // copy_streaming_bytes for collectives that only copy):
  // its message lands with streaming stores (kernels::Stores::streaming).
  bool streaming_stores = false;
  // A receive whose landed result is sent on (PointToPoint::irecv_reduce_send): this send of
  // `buffer`'s bytes, posted with the receive to a transport that forwards() and started by it,
  // piece by piece as the pieces land (whole, for a message held before its receive came, or
  // where the transport lets the peer read the result in place).
  // The receive's waiter waits for both.
  std::shared_ptr<Request> forward;
  // A send its poster follows at once with more of the call's messages and a wait: a transport
  // that pays a system call per write may keep it for its next send to the peer or its next
  // progress, and write them together (tcp: a root check's message and the call's own).
  bool held = false;
  // Set by the transport.
  std::size_t transferred = 0;
  bool done = false;
  std::exception_ptr error;  // set together with done when the transfer failed

  std::string describe() const;  // "recv of 1048576 B from rank 3 (tag 0x80000012)"
};

// "0x80000012": how tags appear in messages.
std::string hex_tag(std::uint32_t tag);

// A receive that met a message of another call or size: what each side said, reported by the
// transport as data and worded by the core, which knows what the signatures mean
// (src/core/call_signature.hpp). The failure of the receive's transport until then.
class CallMismatch : public InvalidArgument {
 public:
  CallMismatch(const Request& receive, std::uint64_t arrived_bytes,
               std::uint64_t arrived_signature);
  int peer;
  std::uint32_t tag;
  std::uint64_t expected_bytes, arrived_bytes;
  std::uint64_t expected_signature, arrived_signature;
};

// The mismatch between `receive` and a message of `bytes` with `signature`, or null when the
// message belongs to it.
std::exception_ptr check_match(const Request& receive, std::uint64_t bytes,
                               std::uint64_t signature);

using RequestPtr = std::shared_ptr<Request>;

}  // namespace arcoll
