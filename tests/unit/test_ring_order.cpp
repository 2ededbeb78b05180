// Ring order follows hosts, then NUMA nodes within a host, whatever the rank numbering.
#include <gtest/gtest.h>

#include "algorithms/cost_model.hpp"
#include "algorithms/ring.hpp"

namespace arcoll {
namespace {

// Placement only: ring order never sends anything.
class Placement final : public PointToPoint {
 public:
  Placement(std::vector<int> hosts, std::vector<int> numa)
      : hosts_(std::move(hosts)), numa_(std::move(numa)) {}
  int rank() const override { return 0; }
  int size() const override { return static_cast<int>(hosts_.size()); }
  int node_of(int r) const override { return hosts_[static_cast<std::size_t>(r)]; }
  int numa_of(int r) const override { return numa_[static_cast<std::size_t>(r)]; }
  std::size_t chunk_bytes() const override { return 0; }
  bool pace_returns() override { return false; }
  const Layout& layout() const override { return layout_; }
  RequestPtr isend(int, const void*, std::size_t, int) override { return nullptr; }
  RequestPtr irecv(int, void*, std::size_t, int) override { return nullptr; }
  RequestPtr irecv_reduce(int, void*, const void*, std::size_t, DataType, ReduceOp, int) override {
    return nullptr;
  }
  RequestPtr irecv_reduce_send(int, void*, const void*, std::size_t, DataType, ReduceOp, int,
                               int) override {
    return nullptr;
  }
  void wait(const RequestPtr&) override {}
  void* scratch(std::size_t, int) override { return nullptr; }
  void copy(void*, const void*, std::size_t) override {}
  void round_to_wire(void*, std::size_t, DataType) override {}
  bool rounds_to_wire(DataType) const override { return false; }
  std::size_t board_capacity() const override { return 0; }
  std::span<const std::byte* const> exchange_on_boards(const void*, std::size_t) override {
    return {};
  }

 private:
  std::vector<int> hosts_, numa_;
  Layout layout_;
};

TEST(RingOrder, HostsThenNumaNodesThenRanks) {
  // Ranks dealt round-robin over 2 hosts, and over the 2 NUMA nodes of each host.
  const Placement p({0, 1, 0, 1, 0, 1, 0, 1}, {0, 0, 1, 1, 0, 0, 1, 1});
  EXPECT_EQ(ring::host_order(p), (std::vector<int>{0, 4, 2, 6, 1, 5, 3, 7}));
}

TEST(RingOrder, UnknownNumaKeepsRankOrderWithinAHost) {
  const Placement p({1, 0, 1, 0, 0}, {-1, -1, -1, -1, -1});
  EXPECT_EQ(ring::host_order(p), (std::vector<int>{1, 3, 4, 0, 2}));
}

}  // namespace
}  // namespace arcoll
