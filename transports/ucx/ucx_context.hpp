// The process's UCX context, shared by its UCX communicators: UCX's configuration as arcoll
// adjusts it (fifo segments, zero-copy threshold), and the errors of UCX's setup calls.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

namespace arcoll::ucx {

class Context {
 public:
  // The process's context, made by the first communicator that needs one.
  static std::shared_ptr<Context> shared(int rank);
  explicit Context(int rank);
  ~Context() { ucp_cleanup(handle); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // What chose the transports UCX may use, for the errors where they are none or reach no
  // peer.
  static std::string selection();
  // Throws the failure of UCX's setup call `what`.
  static void check(ucs_status_t status, const char* what, int rank);

  ucp_context_h handle = nullptr;
  // UCX was built with CUDA support (its cuda_copy, cuda_ipc, and GPUDirect RDMA where the NIC
  // has it): it moves buffers of CUDA's device memory itself.
  bool moves_cuda = false;
};

}  // namespace arcoll::ucx
