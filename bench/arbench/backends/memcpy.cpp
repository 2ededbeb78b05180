// A reference, not an allreduce: rank 0 copies the buffer with memcpy on one core while the
// other ranks wait, so that a run can put arcoll's busbw next to the copy bandwidth of this
// machine measured at the same moment (`--memcpy`). Its busbw is its algbw (bytes copied per
// second); its rows are not checked.
#include <cstdlib>
#include <cstring>
#include <new>

#include "arbench/backends/backend.hpp"

namespace arbench {
namespace {

class MemcpyBackend final : public Backend {
 public:
  explicit MemcpyBackend(arcoll::Communicator& comm) : comm_(comm) {}
  ~MemcpyBackend() override { std::free(source_); }

  std::string name() const override { return "memcpy"; }
  std::string description() const override {
    return "memcpy of the buffer by rank 0 alone, one core (a copy, not an allreduce)";
  }
  bool reduces() const override { return false; }
  double bus_factor(Coll, int) const override { return 1.0; }

  // Copies a row's size from a buffer of its own into rank 0's receive buffer (the sweep's
  // buffers hold a row whatever the collective), so that the in-place group times a real copy
  // too.
  void run(const Call& c) override {
    if (comm_.rank() != 0) return;
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
  char* source_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace

const BackendRegistrar kMemcpyRegistration{
    {"memcpy", false, [](arcoll::Communicator& comm, const BackendOptions&) {
       return std::unique_ptr<Backend>(std::make_unique<MemcpyBackend>(comm));
     }}};

}  // namespace arbench
