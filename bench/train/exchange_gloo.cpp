// torch's own Gloo process group (c10d::ProcessGroupGloo), what PyTorch users get on CPUs: its
// ranks meet through a c10d::TCPStore that rank 0 serves on a port the kernel picks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstring>
#include <stdexcept>

#include "exchange.hpp"

namespace arbench::train {
namespace {

// The address of this host's interface that reaches `peer` (Gloo binds its pairs there).
std::string address_toward(const std::string& peer) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  if (::inet_pton(AF_INET, peer.c_str(), &to.sin_addr) != 1) return peer;  // a host name
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  const bool found = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  if (fd >= 0) ::close(fd);
  if (!found) return peer;
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

class GlooExchange final : public GradientExchange {
 public:
  explicit GlooExchange(const ExchangeSetup& setup) : timeout_(setup.timeout) {
    const std::string master =
        setup.launch.master_addr.empty() ? "127.0.0.1" : setup.launch.master_addr;
    c10d::TCPStoreOptions options;
    options.timeout = setup.timeout;
    options.waitWorkers = false;
    std::int32_t port = 0;
    c10::intrusive_ptr<c10d::TCPStore> store;
    if (setup.comm.rank() == 0) {
      options.isServer = true;
      options.port = 0;
      options.numWorkers = setup.comm.size();
      store = c10::make_intrusive<c10d::TCPStore>(master, options);
      port = store->getPort();
    }
    setup.comm.broadcast(&port, 1, arcoll::DataType::i32, 0);
    if (setup.comm.rank() != 0) {
      options.port = static_cast<std::uint16_t>(port);
      store = c10::make_intrusive<c10d::TCPStore>(master, options);
    }
    auto group_options = c10d::ProcessGroupGloo::Options::create(setup.timeout);
    group_options->devices = {
        c10d::ProcessGroupGloo::createDeviceForHostname(address_toward(master))};
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, setup.comm.rank(),
                                                         setup.comm.size(), group_options);
  }
  std::string description() const override {
    return "torch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
           std::to_string(TORCH_VERSION_MINOR) + " ProcessGroupGloo allreduce (" +
           std::to_string(group_->getNumThreads()) + " threads)";
  }
  Pending start_sum(float* data, std::size_t count) override {
    std::vector<at::Tensor> tensors{
        at::from_blob(data, {static_cast<std::int64_t>(count)}, at::kFloat)};
    auto work = group_->allreduce(tensors);
    return [work, timeout = timeout_] {
      if (!work->wait(timeout)) throw std::runtime_error("Gloo allreduce did not complete");
    };
  }
  void broadcast(float* data, std::size_t count, int root) override {
    std::vector<at::Tensor> tensors{
        at::from_blob(data, {static_cast<std::int64_t>(count)}, at::kFloat)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    group_->broadcast(tensors, options)->wait(timeout_);
  }

 private:
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

const ExchangeRegistrar kGloo({"gloo", "torch's c10d::ProcessGroupGloo", false, true, nullptr,
                               [](const ExchangeSetup& setup) {
                                 return std::make_unique<GlooExchange>(setup);
                               }});

}  // namespace
}  // namespace arbench::train
