// A subset of a communicator's ranks seen as a communicator of its own (the ranks of one host,
// the ranks with the same local index on every host, or all ranks in another order), with
// its messages on channels of its own. Hierarchical and multi-channel algorithms run the
// plain algorithms over such views.
#pragma once

#include <algorithm>
#include <vector>

#include "arcoll/error.hpp"
#include "algorithms/point_to_point.hpp"

namespace arcoll {

class GroupView final : public PointToPoint {
 public:
  // `members` lists parent ranks in the group's rank order; the caller must be one of them.
  // The group's channel c is the parent's channel `first_channel` + c.
  GroupView(PointToPoint& parent, std::vector<int> members, int first_channel = 0)
      : parent_(parent), members_(std::move(members)), first_channel_(first_channel) {
    const auto me = std::find(members_.begin(), members_.end(), parent.rank());
    if (me == members_.end() || first_channel < 0 || first_channel >= kMaxChannels)
      throw InternalError("group view", "rank " + std::to_string(parent.rank()) +
                                            " is not in the group, or channel out of range");
    rank_ = static_cast<int>(me - members_.begin());
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int node_of(int rank) const override { return parent_.node_of(member(rank)); }
  int numa_of(int rank) const override { return parent_.numa_of(member(rank)); }
  std::size_t chunk_bytes() const override {
    return chunk_bytes_ != 0 ? chunk_bytes_ : parent_.chunk_bytes();
  }
  // The group's own pipeline chunk (the cost model's choice for what runs on it).
  void set_chunk_bytes(std::size_t bytes) { chunk_bytes_ = bytes; }
  bool pace_returns() override { return parent_.pace_returns(); }
  const Layout& layout() const override { return parent_.layout(); }
  RequestPtr isend(int peer, const void* buffer, std::size_t bytes, int channel) override {
    return parent_.isend(member(peer), buffer, bytes, first_channel_ + channel);
  }
  RequestPtr irecv(int peer, void* buffer, std::size_t bytes, int channel) override {
    return parent_.irecv(member(peer), buffer, bytes, first_channel_ + channel);
  }
  RequestPtr irecv_reduce(int peer, void* buffer, const void* with, std::size_t count,
                          DataType type, ReduceOp op, int channel) override {
    return parent_.irecv_reduce(member(peer), buffer, with, count, type, op,
                                first_channel_ + channel);
  }
  RequestPtr irecv_reduce_send(int peer, void* buffer, const void* with, std::size_t count,
                               DataType type, ReduceOp op, int channel,
                               int forward_channel) override {
    return parent_.irecv_reduce_send(member(peer), buffer, with, count, type, op,
                                     first_channel_ + channel, first_channel_ + forward_channel);
  }
  void wait(const RequestPtr& request) override { parent_.wait(request); }
  void* scratch(std::size_t bytes, int slot) override { return parent_.scratch(bytes, slot); }
  void copy(void* to, const void* from, std::size_t bytes) override {
    parent_.copy(to, from, bytes);
  }
  void round_to_wire(void* data, std::size_t count, DataType type) override {
    parent_.round_to_wire(data, count, type);
  }
  bool rounds_to_wire(DataType type) const override { return parent_.rounds_to_wire(type); }
  // A group of every rank (in another order) shares the communicator's boards; a smaller
  // one would wait for posts its non-members never make.
  std::size_t board_capacity() const override {
    return size() == parent_.size() ? parent_.board_capacity() : 0;
  }
  std::span<const std::byte* const> exchange_on_boards(const void* data,
                                                       std::size_t bytes) override {
    if (size() != parent_.size())
      throw InternalError("group view", "boards are shared only by groups of every rank");
    const auto parts = parent_.exchange_on_boards(data, bytes);
    parts_.resize(members_.size());
    for (std::size_t r = 0; r < members_.size(); ++r)
      parts_[r] = parts[static_cast<std::size_t>(members_[r])];
    return parts_;
  }

 private:
  int member(int rank) const { return members_[static_cast<std::size_t>(rank)]; }

  PointToPoint& parent_;
  std::vector<int> members_;
  int first_channel_;
  int rank_ = 0;
  std::size_t chunk_bytes_ = 0;
  std::vector<const std::byte*> parts_;  // exchange_on_boards's, in the group's rank order
};

}  // namespace arcoll
