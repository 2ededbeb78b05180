#include "topology/sources.hpp"

#include <algorithm>
#include <cctype>

#if ARCOLL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstring>
#include <memory>
#endif

namespace arcoll::discovery {

#if ARCOLL_HAVE_CUDA
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// "00000000:3B:00.0" or "0000:3b:00.0" -> "0000:3b:00.0"
std::string normal_bus_id(const char* id) {
  std::string text = lower(id);
  const auto colon = text.find(':');
  if (colon != std::string::npos && colon > 4) text.erase(0, colon - 4);
  return text;
}

// NVML, loaded when present: the driver installs it, the toolkit has no header for it, so
// the few entry points used are declared here with NVML's documented layout.
class Nvml {
 public:
  struct PciInfo {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
  };
  static constexpr unsigned kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS

  Nvml() : library_(dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL), close) {
    if (!library_) return;
    load(init_, "nvmlInit_v2");
    load(shutdown_, "nvmlShutdown");
    load(by_bus_id_, "nvmlDeviceGetHandleByPciBusId_v2");
    load(link_state_, "nvmlDeviceGetNvLinkState");
    load(remote_pci_, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    ready_ = init_ && shutdown_ && by_bus_id_ && link_state_ && remote_pci_ && init_() == 0;
  }
  ~Nvml() {
    if (ready_) shutdown_();
  }
  bool ready() const { return ready_; }

  // Active NVLinks of the GPU at `bus_id`, by the bus id of what is at the other end.
  std::vector<std::string> link_peers(const std::string& bus_id) const {
    std::vector<std::string> peers;
    void* device = nullptr;
    if (by_bus_id_(bus_id.c_str(), &device) != 0) return peers;
    for (unsigned link = 0; link < kMaxLinks; ++link) {
      int active = 0;
      PciInfo remote{};
      if (link_state_(device, link, &active) == 0 && active != 0 &&
          remote_pci_(device, link, &remote) == 0)
        peers.push_back(normal_bus_id(remote.bus_id));
    }
    return peers;
  }

 private:
  static void close(void* handle) {
    if (handle != nullptr) dlclose(handle);
  }
  template <class Function>
  void load(Function*& function, const char* name) {
    function = reinterpret_cast<Function*>(dlsym(library_.get(), name));
  }

  std::unique_ptr<void, void (*)(void*)> library_;
  bool ready_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_id_)(const char*, void**) = nullptr;
  int (*link_state_)(void*, unsigned, int*) = nullptr;
  int (*remote_pci_)(void*, unsigned, PciInfo*) = nullptr;
};

}  // namespace

void cuda_gpus(HostTopology& t) {
  int count = 0;
  if (const cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
    // Without a driver CUDA says "insufficient driver", not "no device": any error means none.
    t.notes.push_back(std::string("the CUDA runtime sees no GPU (") + cudaGetErrorString(error) +
                      "): no CUDA P2P or NVLink matrix");
    return;
  }
  std::vector<std::size_t> index(static_cast<std::size_t>(count));  // CUDA device -> t.gpus
  for (int device = 0; device < count; ++device) {
    char raw[32] = {};
    cudaDeviceProp properties{};
    if (cudaDeviceGetPCIBusId(raw, sizeof raw, device) != cudaSuccess ||
        cudaGetDeviceProperties(&properties, device) != cudaSuccess)
      continue;
    const std::string bus = normal_bus_id(raw);
    auto gpu = std::find_if(t.gpus.begin(), t.gpus.end(),
                            [&](const Gpu& g) { return lower(g.pci_bus_id) == bus; });
    if (gpu == t.gpus.end()) {
      Gpu unseen;  // on the PCI bus but not listed by sysfs (a container, say)
      unseen.pci_bus_id = bus;
      unseen.vendor = "NVIDIA";
      gpu = t.gpus.insert(t.gpus.end(), unseen);
    }
    gpu->cuda_device = device;
    gpu->name = properties.name;
    gpu->memory_bytes = properties.totalGlobalMem;
    index[static_cast<std::size_t>(device)] = static_cast<std::size_t>(gpu - t.gpus.begin());
  }
  const Nvml nvml;
  if (!nvml.ready() && count > 1)
    t.notes.push_back(
        "NVML (libnvidia-ml.so.1) is not usable: NVLinks unknown, P2P from CUDA only");
  // Each GPU's NVLinks, asked of NVML once (up to 18 links each), not once per pair.
  std::vector<std::vector<std::string>> peers(static_cast<std::size_t>(count));
  for (int a = 0; a < count && nvml.ready(); ++a)
    peers[static_cast<std::size_t>(a)] =
        nvml.link_peers(t.gpus[index[static_cast<std::size_t>(a)]].pci_bus_id);
  for (int a = 0; a < count; ++a)
    for (int b = 0; b < count; ++b) {
      if (a == b) continue;
      GpuLink link;
      link.a = static_cast<int>(index[static_cast<std::size_t>(a)]);
      link.b = static_cast<int>(index[static_cast<std::size_t>(b)]);
      int access = 0;
      link.p2p = cudaDeviceCanAccessPeer(&access, a, b) == cudaSuccess && access != 0;
      int rank = -1;
      if (cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b) == cudaSuccess)
        link.performance_rank = rank;
      const auto& from = peers[static_cast<std::size_t>(a)];
      link.nvlinks = static_cast<int>(std::count(
          from.begin(), from.end(), lower(t.gpus[static_cast<std::size_t>(link.b)].pci_bus_id)));
      t.gpu_links.push_back(link);
    }
}

#else

void cuda_gpus(HostTopology& t) {
  t.notes.push_back(
      "the CUDA runtime is not in this build: GPUs from the PCI bus only, no P2P or "
      "NVLink matrix");
}

#endif

}  // namespace arcoll::discovery
