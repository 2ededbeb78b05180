#include "transports/ucx/ucx_context.hpp"

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/log.hpp"
#include "transports/ucx/ucx_transport.hpp"

namespace arcoll::ucx {
namespace {

// Whether UCX_TLS lets UCX take a shared-memory fifo: unset, a list of exclusions ("^..."),
// or a list naming one of them or an alias that includes them.
bool fifo_transports_allowed() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || tls[0] == '^') return true;
  std::istringstream names(tls);
  for (std::string name; std::getline(names, name, ',');)
    for (const char* fifo : {"all", "sm", "shm", "mm", "posix", "sysv", "xpmem"})
      if (name == fifo) return true;
  return false;
}

// Whether the kernel lists an RDMA device (InfiniBand, RoCE, iWARP), which UCX would use.
bool host_has_rdma_device() {
  std::error_code error;
  return std::filesystem::directory_iterator("/sys/class/infiniband", error) !=
         std::filesystem::directory_iterator();
}

}  // namespace

std::shared_ptr<Context> Context::shared(int rank) {
  static std::mutex mutex;
  static std::weak_ptr<Context> cached;
  std::lock_guard lock(mutex);
  if (auto existing = cached.lock()) return existing;
  auto made = std::make_shared<Context>(rank);
  cached = made;
  return made;
}

Context::Context(int rank) {
  ucp_config_t* config = nullptr;  // UCX_* variables of the environment
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read", rank);
  // Shared-memory fifo segments that hold one piece each (kPieceBytes), unless the
  // environment sizes them; their receive pool grows by as many bytes as with UCX's default
  // segments (512 of them a step: 4 ranks held 80 MiB of shared memory where they held 25).
  // UCX applies the keys to its shared-memory transports' common table (posix, sysv,
  // xpmem); their own names are not matched there. Should UCX refuse, pieces larger than a
  // segment still arrive (assembled by UCX first). Where UCX_TLS leaves those transports out,
  // UCX would warn at every worker that nothing took the keys.
  for (const auto& [key, value] :
       {std::pair{"SEG_SIZE", kFifoSegmentBytes}, std::pair{"RX_BUFS_GROW", kFifoRxBufsGrow}}) {
    const std::string name(key);
    if (std::getenv(("UCX_POSIX_" + name).c_str()) != nullptr ||
        std::getenv(("UCX_SYSV_" + name).c_str()) != nullptr || !fifo_transports_allowed())
      continue;
    const ucs_status_t modified =
        ucp_config_modify(config, ("MM_" + name).c_str(), std::to_string(value).c_str());
    if (modified != UCS_OK)
      log::warn("ucx: UCX kept its default " + name + ": " + ucs_status_string(modified));
  }
  // Eager messages go through TCP by copy, not zero-copy, where this host has no RDMA device
  // (UCX's network lanes are then TCP's), unless UCX_ZCOPY_THRESH is set: between 2 emulated
  // hosts of 2 ranks on 1 Gbit/s links, a rank of each host exchanging its shard with its
  // partner on the other, messages of 128-512 KiB took 1.3-3.3 times as long by zero-copy as
  // by copy in a pass or two of most runs (all-reduce of 256 KiB, shm within the hosts:
  // 2.0-2.3 ms by copy in 4 runs, 2.0-7.2 ms by zero-copy); from 1 MiB, and on 4 hosts of one
  // rank, both ways took the same time. With no RDMA device UCX copies through shared memory
  // within a host, which has no zero-copy sends; only where UCX_TLS makes it use TCP there
  // too do the copies cost (those 2 hosts, UCX between every pair: all-reduces of 2-64 MiB
  // 4-20% slower in 2 runs each, in turn).
  if (std::getenv("UCX_ZCOPY_THRESH") == nullptr && !host_has_rdma_device()) {
    const ucs_status_t modified = ucp_config_modify(config, "ZCOPY_THRESH", "inf");
    if (modified != UCS_OK)
      log::warn(std::string("ucx: UCX kept its zero-copy threshold: ") +
                ucs_status_string(modified));
  }
  ucp_params_t params{};
  // Its workers may move in several threads at once: communicators used by different
  // threads, and parked ones moved by another communicator's waits.
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  const ucs_status_t status = ucp_init(&params, config, &handle);
  ucp_config_release(config);
  if (status == UCS_ERR_NO_DEVICE)
    throw ConfigurationError("ucx setup",
                             std::string("UCX may use none of this host's transports (ucp_init: ") +
                                 ucs_status_string(status) + ") " + selection(),
                             rank);
  check(status, "ucp_init", rank);
  ucp_context_attr_t attributes{};
  attributes.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  moves_cuda = ucp_context_query(handle, &attributes) == UCS_OK &&
               (attributes.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

std::string Context::selection() {
  std::string chosen;
  for (const char* name : {"UCX_TLS", "UCX_NET_DEVICES"})
    if (const char* value = std::getenv(name))
      chosen += std::string(chosen.empty() ? "" : " ") + name + "=" + value;
  return (chosen.empty() ? std::string("with UCX's own choice of transports") : "under " + chosen) +
         " (`ucx_info -d` lists this host's; UCX_TLS and UCX_NET_DEVICES choose among them)";
}

void Context::check(ucs_status_t status, const char* what, int rank) {
  if (status != UCS_OK)
    throw SystemError("ucx setup", std::string(what) + ": " + ucs_status_string(status), rank);
}

}  // namespace arcoll::ucx
