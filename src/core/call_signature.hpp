// What a collective call is, packed into 64 bits that travel in the header of each of its
// messages. A receive takes a message only when the sender's signature equals its own, so
// ranks that call different collectives, counts, types, ops, roots, algorithms or wire formats
// at the same
// step get an error naming both calls instead of a hang or a misread buffer. Zero marks
// point-to-point messages.
#pragma once

#include <cstdint>
#include <string>

#include "arcoll/types.hpp"
#include "src/base/request.hpp"

namespace arcoll {

enum class Collective : std::uint8_t;

// Roots below this differ in the signatures of their calls.
inline constexpr int kSignatureRoots = 512;

struct CallSignature {
  Collective collective;
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  int algorithm = 0;        // index among the registered algorithms
  int root = 0;             // kept modulo kSignatureRoots (the root check compares it whole)
  std::uint64_t count = 0;  // kept modulo 2^38 (a quarter of a trillion elements)
  DataType wire = DataType::f32;  // how f32 elements travel: f32, f16 or bf16
};

std::uint64_t pack(const CallSignature& call);
// "allreduce of 1000 f32 (sum, algorithm ring)", "point-to-point" for zero.
std::string describe_signature(std::uint64_t signature);
// Why a receive could not take the message a transport found for it, and what to check.
std::string describe(const CallMismatch& mismatch);
// That rank `peer` is in the call `theirs` where this rank is in `ours`, met `where`.
std::string describe_mismatch(int peer, std::uint64_t theirs, std::uint64_t ours,
                              const std::string& where);

}  // namespace arcoll
