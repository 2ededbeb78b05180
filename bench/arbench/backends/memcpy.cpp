// References, not all-reduces, timed in the same run as arcoll (`--memcpy`):
// - memcpy: rank 0 copies the buffer with memcpy on one core while the other ranks wait. Its
//   busbw is its algbw (bytes copied per second).
// - ceiling: every rank at once does the least memory work an all-reduce of n ranks that share
//   memory must do, on buffers of its own, with no peer and no synchronization: it reduces its
//   1/n of the n inputs and copies the other (n-1)/n of the result with arcoll's kernels
//   (arcoll::reduce_local, copy_local: streaming stores on slices of 16 MiB and more). Its
//   time is what the memory allows an all-reduce; its busbw, with the all-reduce's bus factor,
//   the most an all-reduce can reach here, and the ratio column is arcoll's fraction of it.
//   With more than 2 ranks it reduces pairwise, as the ring's steps do: each step reads and
//   writes the share again, more than a single n-way pass would.
// Neither reduces into a result that is checked.
#include <cstdlib>
#include <cstring>
#include <new>

#include "arbench/backends/backend.hpp"
#include "arcoll/local.hpp"

namespace arbench {
namespace {

// A buffer of its own that a row's bytes are read from, touched so that page faults stay
// out of the timing.
class SourceBuffer {
 public:
  ~SourceBuffer() { std::free(data_); }
  const char* at_least(std::size_t bytes) {
    if (bytes > capacity_) {
      std::free(data_);
      data_ = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      if (data_ == nullptr) throw std::bad_alloc();
      std::memset(data_, 1, bytes);
      capacity_ = bytes;
    }
    return data_;
  }

 private:
  char* data_ = nullptr;
  std::size_t capacity_ = 0;
};

class MemcpyBackend final : public Backend {
 public:
  explicit MemcpyBackend(arcoll::Communicator& comm) : comm_(comm) {}

  std::string name() const override { return "memcpy"; }
  std::string description() const override {
    return "memcpy of the buffer by rank 0 alone, one core (a copy, not an allreduce)";
  }
  bool reduces() const override { return false; }
  double bus_factor(Coll, int) const override { return 1.0; }

  // Copies a row's size into the receive buffer (the sweep's buffers hold a row whatever the
  // collective), so that the in-place group times a real copy too.
  void run(const Call& c) override {
    if (comm_.rank() != 0) return;
    const std::size_t bytes =
        (splits_row(c.coll) ? c.count * static_cast<std::size_t>(comm_.size()) : c.count) *
        arcoll::size_of(c.type);
    std::memcpy(c.recv, source_.at_least(bytes), bytes);
  }
  void barrier() override { comm_.barrier(); }

 private:
  arcoll::Communicator& comm_;
  SourceBuffer source_;
};

class CeilingBackend final : public Backend {
 public:
  explicit CeilingBackend(arcoll::Communicator& comm) : comm_(comm) {}

  std::string name() const override { return "ceiling"; }
  std::string description() const override {
    return "memory ceiling of an all-reduce: every rank at once reduces its 1/n of n inputs "
           "and copies the other (n-1)/n with arcoll's kernels, on buffers of its own (no "
           "peers, no synchronization)";
  }
  std::optional<std::string> unsupported(Coll coll, arcoll::DataType type,
                                         arcoll::ReduceOp op) const override {
    if (coll != Coll::allreduce) return "the ceiling is an all-reduce's";
    return Backend::unsupported(coll, type, op);
  }
  bool reduces() const override { return false; }

  // The n inputs are n consecutive slices of this rank's share in a buffer of about the row's
  // size: this rank reads about the whole of it, as an all-reduce reads its share of every
  // rank's input.
  void run(const Call& c) override {
    const std::size_t n = static_cast<std::size_t>(comm_.size());
    const std::size_t me = static_cast<std::size_t>(comm_.rank());
    const std::size_t elem = arcoll::size_of(c.type);
    const char* inputs = source_.at_least((c.count + n) * elem);  // shares differ by one
    auto* out = static_cast<char*>(c.recv);
    auto begin = [&](std::size_t slice) { return c.count * slice / n; };
    if (n == 1) {
      arcoll::copy_local(out, inputs, c.count * elem);
      return;
    }
    // avg reduces as sum; its one division at the end is not memory work.
    const arcoll::ReduceOp op = c.op == arcoll::ReduceOp::avg ? arcoll::ReduceOp::sum : c.op;
    const std::size_t first = begin(me), count = begin(me + 1) - first;
    char* mine = out + first * elem;
    arcoll::reduce_local(inputs, inputs + count * elem, mine, count, c.type, op);
    for (std::size_t k = 2; k < n; ++k)
      arcoll::reduce_local(mine, inputs + k * count * elem, mine, count, c.type, op);
    for (std::size_t slice = 0; slice < n; ++slice)
      if (slice != me)
        arcoll::copy_local(out + begin(slice) * elem, inputs + begin(slice) * elem,
                           (begin(slice + 1) - begin(slice)) * elem);
  }
  void barrier() override { comm_.barrier(); }

 private:
  arcoll::Communicator& comm_;
  SourceBuffer source_;
};

}  // namespace

const BackendRegistrar kMemcpyRegistration{
    {"memcpy", false, [](arcoll::Communicator& comm, const BackendOptions&) {
       return std::unique_ptr<Backend>(std::make_unique<MemcpyBackend>(comm));
     }}};
const BackendRegistrar kCeilingRegistration{
    {"ceiling", false, [](arcoll::Communicator& comm, const BackendOptions&) {
       return std::unique_ptr<Backend>(std::make_unique<CeilingBackend>(comm));
     }}};

}  // namespace arbench
