#include "src/core/call_signature.hpp"

#include "algorithms/algorithm.hpp"

namespace arcoll {
namespace {

// Bit fields, from the low end: count 38, wire 2, root 9, algorithm 4, op 3, type 4,
// collective 4. The collective is stored plus one so that no call packs to zero.
constexpr int kWireShift = 38, kRootShift = 40, kAlgorithmShift = 49, kOpShift = 53,
              kTypeShift = 56, kCollectiveShift = 60;
constexpr std::uint64_t kCountMask = (1ull << 38) - 1;
constexpr int kRootBits = 9;
static_assert(1 << kRootBits == kSignatureRoots);
// The wire formats by their 2-bit code.
constexpr DataType kWires[] = {DataType::f32, DataType::f16, DataType::bf16};

unsigned wire_code(DataType wire) {
  return wire == DataType::f16 ? 1 : wire == DataType::bf16 ? 2 : 0;
}

std::uint64_t field(std::uint64_t value, int shift, int bits) {
  return (value & ((1ull << bits) - 1)) << shift;
}
unsigned take(std::uint64_t packed, int shift, int bits) {
  return static_cast<unsigned>((packed >> shift) & ((1ull << bits) - 1));
}

}  // namespace

std::uint64_t pack(const CallSignature& call) {
  return (call.count & kCountMask) | field(wire_code(call.wire), kWireShift, 2) |
         field(static_cast<unsigned>(call.root), kRootShift, kRootBits) |
         field(static_cast<unsigned>(call.algorithm), kAlgorithmShift, 4) |
         field(static_cast<unsigned>(call.op), kOpShift, 3) |
         field(static_cast<unsigned>(call.type), kTypeShift, 4) |
         field(static_cast<unsigned>(call.collective) + 1u, kCollectiveShift, 4);
}

std::string describe_signature(std::uint64_t signature) {
  if (signature == 0) return "point-to-point";
  const auto collective = static_cast<Collective>(take(signature, kCollectiveShift, 4) - 1);
  const auto type = static_cast<DataType>(take(signature, kTypeShift, 4));
  const auto op = static_cast<ReduceOp>(take(signature, kOpShift, 3));
  const auto algorithms = AlgorithmRegistry::instance().all();
  const unsigned algorithm = take(signature, kAlgorithmShift, 4);
  const bool reduces = collective == Collective::allreduce ||
                       collective == Collective::reduce_scatter || collective == Collective::reduce;
  const bool rooted = collective == Collective::broadcast || collective == Collective::reduce ||
                      collective == Collective::gather || collective == Collective::scatter;
  std::string text =
      std::string(to_string(collective)) + " of " +
      (collective == Collective::alltoallv ? std::string("blocks of ")
                                           : std::to_string(signature & kCountMask) + " ") +
      std::string(to_string(type)) + " (";
  if (reduces) text += std::string(to_string(op)) + ", ";
  if (const unsigned wire = take(signature, kWireShift, 2); wire != 0 && wire < 3)
    text += "wire " + std::string(to_string(kWires[wire])) + ", ";
  if (rooted) text += "root " + std::to_string(take(signature, kRootShift, kRootBits)) + ", ";
  return text + "algorithm " +
         (algorithm < algorithms.size() ? algorithms[algorithm]->name : std::to_string(algorithm)) +
         ")";
}

std::string describe_mismatch(int peer, std::uint64_t theirs, std::uint64_t ours,
                              const std::string& where) {
  return "call mismatch: rank " + std::to_string(peer) + " is in " + describe_signature(theirs) +
         " where this rank is in " + describe_signature(ours) + " (" + where +
         "): do all ranks make the same calls, with the same count, type, op and root (and "
         "set_wire)?";
}

std::string describe(const CallMismatch& m) {
  if (m.arrived_signature != m.expected_signature)
    return describe_mismatch(m.peer, m.arrived_signature, m.expected_signature,
                             "tag " + hex_tag(m.tag));
  return "rank " + std::to_string(m.peer) + " sent " + std::to_string(m.arrived_bytes) +
         " B where this rank expected " + std::to_string(m.expected_bytes) + " B (tag " +
         hex_tag(m.tag) + "): do all ranks pass the same count and type?";
}

}  // namespace arcoll
