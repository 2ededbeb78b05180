// The host's RDMA device through rdma-core: one protection domain, one completion queue with
// its channel (for sleeping), one RC queue pair per peer. Connection data (LID, GID, QPN, PSN,
// MTU) travels through the store. GID selection for RoCE follows NCCL's: ARCOLL_IB_GID_INDEX
// when set, else the table is scanned for a RoCE v2 entry of an IPv4 address (routable across
// subnets), then any RoCE v2, then index 0; InfiniBand addresses by LID.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/env.hpp"
#include "transports/verbs/device.hpp"

namespace arcoll::verbs {
namespace {

constexpr int kQueueDepth = 512;  // work requests per queue pair, each way
constexpr int kCompletionDepth = 8192;
// 4.096 us x 2^18: a peer that stops answering fails a send after about a second per retry.
constexpr std::uint8_t kAckTimeout = 18;
constexpr std::uint8_t kRetries = 7;

[[noreturn]] void fail(const std::string& what, int error) {
  throw SystemError("verbs setup", what + ": " + std::strerror(error));
}

Status status_of(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return Status::ok;
    case IBV_WC_WR_FLUSH_ERR:
      return Status::flushed;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return Status::retry_exceeded;
    case IBV_WC_REM_ACCESS_ERR:
      return Status::remote_access;
    case IBV_WC_REM_INV_REQ_ERR:
      return Status::remote_invalid;
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
      return Status::local_error;
    default:
      return Status::other;
  }
}

// The devices of the host (none where the kernel has no RDMA support: errno ENOSYS).
struct DeviceList {
  DeviceList() { devices = ::ibv_get_device_list(&count); }
  ~DeviceList() {
    if (devices != nullptr) ::ibv_free_device_list(devices);
  }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;
  ibv_device** devices = nullptr;
  int count = 0;
};

class Hca final : public Device {
 public:
  explicit Hca(const DeviceSetup& setup) : rank_(setup.rank) {
    try {
      open(setup);
    } catch (...) {
      release();
      throw;
    }
  }

  ~Hca() override { release(); }

  void open(const DeviceSetup& setup) {
    DeviceList list;
    if (list.devices == nullptr || list.count == 0)
      throw ConfigurationError(
          "verbs",
          "no RDMA device (ibv_get_device_list found none" +
              std::string(errno == ENOSYS ? ": the kernel has no RDMA support" : "") +
              "); use another transport, or ARCOLL_VERBS_DEVICE=emulated to try the protocol",
          rank_);
    std::string wanted = env::get("ARCOLL_IB_HCA").value_or("");
    int wanted_port = 0;
    if (const auto colon = wanted.find(':'); colon != std::string::npos) {
      wanted_port = std::atoi(wanted.c_str() + colon + 1);
      wanted.resize(colon);
    }
    for (int i = 0; i < list.count && context_ == nullptr; ++i) {
      const std::string name = ::ibv_get_device_name(list.devices[i]);
      if (!wanted.empty() && name != wanted) continue;
      ibv_context* context = ::ibv_open_device(list.devices[i]);
      if (context == nullptr) continue;
      ibv_device_attr attr{};
      ::ibv_query_device(context, &attr);
      for (int port = 1; port <= attr.phys_port_cnt; ++port) {
        if (wanted_port != 0 && port != wanted_port) continue;
        ibv_port_attr port_attr{};
        if (::ibv_query_port(context, static_cast<std::uint8_t>(port), &port_attr) == 0 &&
            port_attr.state == IBV_PORT_ACTIVE) {
          context_ = context;
          name_ = name;
          port_ = static_cast<std::uint8_t>(port);
          port_attr_ = port_attr;
          break;
        }
      }
      if (context_ == nullptr) ::ibv_close_device(context);
    }
    if (context_ == nullptr)
      throw ConfigurationError("verbs",
                               "no active port on " +
                                   (wanted.empty() ? std::string("any RDMA device")
                                                   : "RDMA device " + wanted) +
                                   " (ARCOLL_IB_HCA)",
                               rank_);
    pd_ = ::ibv_alloc_pd(context_);
    if (pd_ == nullptr) fail("ibv_alloc_pd", errno);
    channel_ = ::ibv_create_comp_channel(context_);
    if (channel_ == nullptr) fail("ibv_create_comp_channel", errno);
    cq_ = ::ibv_create_cq(context_, kCompletionDepth, nullptr, channel_, 0);
    if (cq_ == nullptr) fail("ibv_create_cq", errno);
    ::ibv_req_notify_cq(cq_, 0);
    wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    choose_gid();
    for (int peer : setup.peers) create_qp(peer);
  }

  void release() noexcept {
    for (auto& [peer, qp] : qps_) ::ibv_destroy_qp(qp);
    qps_.clear();
    if (cq_ != nullptr) ::ibv_destroy_cq(std::exchange(cq_, nullptr));
    if (channel_ != nullptr) ::ibv_destroy_comp_channel(std::exchange(channel_, nullptr));
    if (pd_ != nullptr) ::ibv_dealloc_pd(std::exchange(pd_, nullptr));
    if (context_ != nullptr) ::ibv_close_device(std::exchange(context_, nullptr));
  }

  std::string describe() const override {
    return name_ + " port " + std::to_string(port_) +
           (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET
                ? ", RoCE, GID index " + std::to_string(gid_index_)
                : ", InfiniBand, LID " + std::to_string(port_attr_.lid));
  }

  MemoryKey register_memory(void* address, std::size_t bytes) override {
    ibv_mr* mr = ::ibv_reg_mr(pd_, address, bytes,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ);
    if (mr == nullptr)
      throw SystemError("verbs", "ibv_reg_mr of " + std::to_string(bytes) +
                                     " B: " + std::strerror(errno) +
                                     " (is the locked-memory limit, ulimit -l, too low?)",
                        rank_);
    return {mr->lkey, mr->rkey, reinterpret_cast<std::uint64_t>(mr)};
  }

  void deregister_memory(const MemoryKey& key) override {
    ::ibv_dereg_mr(reinterpret_cast<ibv_mr*>(key.handle));
  }

  std::string local_address(int peer) const override {
    char gid[40];
    for (int i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", gid_.raw[i]);
    std::ostringstream text;
    text << port_attr_.lid << ' ' << gid << ' ' << qps_.at(peer)->qp_num << ' ' << psn_of(peer)
         << ' ' << static_cast<int>(port_attr_.active_mtu);
    return text.str();
  }

  void connect(int peer, const std::string& remote) override {
    unsigned lid = 0, qpn = 0, psn = 0;
    int mtu = 0;
    char gid_text[64] = {};
    if (std::sscanf(remote.c_str(), "%u %63s %u %u %d", &lid, gid_text, &qpn, &psn, &mtu) != 5)
      throw ProtocolError("verbs setup", "malformed queue-pair address '" + remote + "'", rank_,
                          peer);
    ibv_gid gid{};
    for (int i = 0; i < 16; ++i) {
      unsigned byte = 0;
      std::sscanf(gid_text + 2 * i, "%2x", &byte);
      gid.raw[i] = static_cast<std::uint8_t>(byte);
    }
    ibv_qp* qp = qps_.at(peer);
    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = static_cast<ibv_mtu>(std::min<int>(mtu, port_attr_.active_mtu));
    rtr.dest_qp_num = qpn;
    rtr.rq_psn = psn;
    rtr.max_dest_rd_atomic = 1;
    rtr.min_rnr_timer = 12;
    rtr.ah_attr.port_num = port_;
    if (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET) {
      rtr.ah_attr.is_global = 1;
      rtr.ah_attr.grh.dgid = gid;
      rtr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
      rtr.ah_attr.grh.hop_limit = 64;
    } else {
      rtr.ah_attr.dlid = static_cast<std::uint16_t>(lid);
    }
    if (::ibv_modify_qp(qp, &rtr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) !=
        0)
      fail("ibv_modify_qp to RTR for rank " + std::to_string(peer), errno);
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = kAckTimeout;
    rts.retry_cnt = kRetries;
    rts.rnr_retry = kRetries;
    rts.sq_psn = psn_of(peer);
    rts.max_rd_atomic = 1;
    if (::ibv_modify_qp(qp, &rts,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
      fail("ibv_modify_qp to RTS for rank " + std::to_string(peer), errno);
  }

  void post_receive(int peer, std::uint64_t wr_id, const Segment& into) override {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(into.address), into.bytes, into.lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (const int error = ::ibv_post_recv(qps_.at(peer), &wr, &bad); error != 0)
      throw SystemError("verbs", "ibv_post_recv: " + std::string(std::strerror(error)), rank_,
                        peer);
  }

  void post_send(int peer, std::uint64_t wr_id, const Segment& from) override {
    post(peer, wr_id, from, IBV_WR_SEND, 0, 0, 0);
  }

  void post_write_with_imm(int peer, std::uint64_t wr_id, const Segment& from,
                           std::uint64_t remote_address, std::uint32_t rkey,
                           std::uint32_t imm) override {
    post(peer, wr_id, from, IBV_WR_RDMA_WRITE_WITH_IMM, remote_address, rkey, imm);
  }

  std::size_t poll(std::span<Completion> out) override {
    ibv_wc wc[64];
    const int n = ::ibv_poll_cq(cq_, static_cast<int>(std::min<std::size_t>(out.size(), 64)), wc);
    if (n < 0) throw SystemError("verbs", "ibv_poll_cq failed", rank_);
    for (int i = 0; i < n; ++i) {
      Completion& c = out[static_cast<std::size_t>(i)];
      c.wr_id = wc[i].wr_id;
      c.status = status_of(wc[i].status);
      c.bytes = wc[i].byte_len;
      c.peer = peer_of_qpn_.count(wc[i].qp_num) ? peer_of_qpn_.at(wc[i].qp_num) : -1;
      switch (wc[i].opcode) {
        case IBV_WC_SEND:
          c.opcode = Opcode::send;
          break;
        case IBV_WC_RDMA_WRITE:
          c.opcode = Opcode::write_with_imm;
          break;
        case IBV_WC_RECV_RDMA_WITH_IMM:
          c.opcode = Opcode::receive_with_imm;
          c.imm = ntohl(wc[i].imm_data);
          break;
        default:  // IBV_WC_RECV; an error completion carries no opcode: its wr_id tells
          c.opcode = Opcode::receive;
          break;
      }
    }
    return static_cast<std::size_t>(n);
  }

  void wait(Clock::time_point until) override {
    pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(fds, 2, net::poll_timeout_ms(until)) <= 0) return;
    if (fds[1].revents != 0) {
      std::uint64_t count = 0;
      [[maybe_unused]] auto n = ::read(wake_.get(), &count, sizeof count);
    }
    if (fds[0].revents != 0) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      if (::ibv_get_cq_event(channel_, &cq, &context) == 0) {
        ::ibv_ack_cq_events(cq, 1);
        ::ibv_req_notify_cq(cq, 0);
      }
    }
  }

  void wake() noexcept override {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
  }

 private:
  void choose_gid() {
    if (port_attr_.link_layer != IBV_LINK_LAYER_ETHERNET) return;  // InfiniBand: the LID
    if (auto index = env::get_int("ARCOLL_IB_GID_INDEX")) {
      gid_index_ = static_cast<int>(*index);
    } else {
      int best = -1, rank = -1;  // 2: RoCE v2 of IPv4, 1: RoCE v2, 0: any
      for (int i = 0; i < port_attr_.gid_tbl_len; ++i) {
        ibv_gid_entry entry{};
        if (::ibv_query_gid_ex(context_, port_, static_cast<std::uint32_t>(i), &entry, 0) != 0)
          continue;
        const bool v2 = entry.gid_type == IBV_GID_TYPE_ROCE_V2;
        const auto* raw = entry.gid.raw;
        const bool ipv4 = std::all_of(raw, raw + 10, [](std::uint8_t b) { return b == 0; }) &&
                          raw[10] == 0xff && raw[11] == 0xff;
        const int score = v2 ? (ipv4 ? 2 : 1) : 0;
        if (score > rank) {
          rank = score;
          best = i;
        }
      }
      gid_index_ = best < 0 ? 0 : best;
    }
    if (::ibv_query_gid(context_, port_, gid_index_, &gid_) != 0)
      fail("ibv_query_gid index " + std::to_string(gid_index_), errno);
  }

  void create_qp(int peer) {
    ibv_qp_init_attr init{};
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = kQueueDepth;
    init.cap.max_recv_wr = kQueueDepth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    ibv_qp* qp = ::ibv_create_qp(pd_, &init);
    if (qp == nullptr) fail("ibv_create_qp for rank " + std::to_string(peer), errno);
    qps_[peer] = qp;
    peer_of_qpn_[qp->qp_num] = peer;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port_;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (::ibv_modify_qp(qp, &attr,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
      fail("ibv_modify_qp to INIT", errno);
  }

  // A starting packet number per queue pair, the same whoever computes it.
  std::uint32_t psn_of(int peer) const {
    return (static_cast<std::uint32_t>(rank_) * 7919u + static_cast<std::uint32_t>(peer) * 104729u) &
           0xffffffu;
  }

  void post(int peer, std::uint64_t wr_id, const Segment& from, ibv_wr_opcode opcode,
            std::uint64_t remote_address, std::uint32_t rkey, std::uint32_t imm) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(from.address), from.bytes, from.lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = from.bytes == 0 ? nullptr : &sge;
    wr.num_sge = from.bytes == 0 ? 0 : 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remote_address;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    if (const int error = ::ibv_post_send(qps_.at(peer), &wr, &bad); error != 0)
      throw SystemError("verbs", "ibv_post_send: " + std::string(std::strerror(error)), rank_,
                        peer);
  }

  int rank_;
  ibv_context* context_ = nullptr;
  std::string name_;
  std::uint8_t port_ = 1;
  ibv_port_attr port_attr_{};
  int gid_index_ = 0;
  ibv_gid gid_{};
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  net::Fd wake_;
  std::map<int, ibv_qp*> qps_;
  std::map<std::uint32_t, int> peer_of_qpn_;
};

}  // namespace

bool has_rdma_device() {
  DeviceList list;
  return list.devices != nullptr && list.count > 0;
}

std::unique_ptr<Device> open_hca(const DeviceSetup& setup) {
  return std::make_unique<Hca>(setup);
}

}  // namespace arcoll::verbs
