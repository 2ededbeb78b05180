// References, not all-reduces, timed in the same run as arcoll (`--memcpy`):
// - memcpy: rank 0 copies the buffer with memcpy on one core while the other ranks wait. Its
//   busbw is its algbw (bytes copied per second).
// - ceiling: every rank copies the buffer at once, which gives the copy rate M of all the
//   ranks' cores together. An all-reduce of N bytes over n ranks that share memory moves at
//   least (3n - 1) N bytes through it (each rank reads its 1/n of every input and writes its
//   reduced 1/n, then copies the other n - 1 reduced pieces: n N + N + 2 (n - 1) N), and a
//   copy moves 2 bytes per byte copied, so the all-reduce takes at least (3n - 1) N / (2 M):
//   its busbw at most 4 M (n - 1) / (n (3n - 1)), which is what this row shows (2 ranks:
//   2 M / 5). The ratio column is arcoll's fraction of that ceiling.
// Neither reduces: their rows are not checked.
#include <cstdlib>
#include <cstring>
#include <new>

#include "arbench/backends/backend.hpp"

namespace arbench {
namespace {

class MemcpyBackend final : public Backend {
 public:
  MemcpyBackend(arcoll::Communicator& comm, bool every_rank)
      : comm_(comm), every_rank_(every_rank) {}
  ~MemcpyBackend() override { std::free(source_); }

  std::string name() const override { return every_rank_ ? "ceiling" : "memcpy"; }
  std::string description() const override {
    return every_rank_ ? "memory-traffic ceiling of an all-reduce: every rank copies the buffer "
                         "at once; busbw = the fastest an all-reduce moving (3n-1) x the "
                         "buffer at that copy rate can reach"
                       : "memcpy of the buffer by rank 0 alone, one core (a copy, not an "
                         "allreduce)";
  }
  std::optional<std::string> unsupported(Coll coll, arcoll::DataType type,
                                         arcoll::ReduceOp op) const override {
    if (every_rank_ && coll != Coll::allreduce) return "the ceiling is an all-reduce's";
    return Backend::unsupported(coll, type, op);
  }
  bool reduces() const override { return false; }
  double bus_factor(Coll, int world_size) const override {
    if (!every_rank_) return 1.0;
    // algbw = N / t; the ranks copy n N bytes in t, so M = n algbw (see the top).
    const double n = world_size;
    return world_size > 1 ? 4 * (n - 1) / (3 * n - 1) : 1.0;
  }

  // Copies a row's size from a buffer of its own into the receive buffer (the sweep's buffers
  // hold a row whatever the collective), so that the in-place group times a real copy too.
  void run(const Call& c) override {
    if (!every_rank_ && comm_.rank() != 0) return;
    const std::size_t bytes = (splits_row(c.coll) ? c.count * static_cast<std::size_t>(comm_.size())
                                                  : c.count) *
                              arcoll::size_of(c.type);
    if (bytes > capacity_) {
      std::free(source_);
      source_ = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      if (source_ == nullptr) throw std::bad_alloc();
      std::memset(source_, 1, bytes);  // touched: page faults stay out of the timing
      capacity_ = bytes;
    }
    std::memcpy(c.recv, source_, bytes);
  }
  void barrier() override { comm_.barrier(); }

 private:
  arcoll::Communicator& comm_;
  const bool every_rank_;
  char* source_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace

const BackendRegistrar kMemcpyRegistration{
    {"memcpy", false, [](arcoll::Communicator& comm, const BackendOptions&) {
       return std::unique_ptr<Backend>(std::make_unique<MemcpyBackend>(comm, false));
     }}};
const BackendRegistrar kCeilingRegistration{
    {"ceiling", false, [](arcoll::Communicator& comm, const BackendOptions&) {
       return std::unique_ptr<Backend>(std::make_unique<MemcpyBackend>(comm, true));
     }}};

}  // namespace arbench
