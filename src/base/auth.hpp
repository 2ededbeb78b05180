// Who may connect to a job's listening sockets: only processes that know the job's secret
// token. The listener sends a fresh random challenge; the connecting side answers with an
// HMAC-SHA256 of the challenge (and what it says next) under the token, so the token never
// travels. The local launcher and the MPI bootstrap make a token for each job; other
// launchers pass one in ARCOLL_JOB_TOKEN. Without any, the empty token is used: connections
// are then checked for being arcoll's, not for being this job's, and rank 0 says so.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace arcoll::auth {

inline constexpr std::uint32_t kChallengeMagic = 0x43545241;  // "ARTC"

struct Challenge {
  std::uint32_t magic;
  std::uint32_t version;
  std::array<std::uint8_t, 16> nonce;
};
static_assert(sizeof(Challenge) == 24);  // no padding: its bytes are the wire format

using Mac = std::array<std::uint8_t, 32>;

// A new challenge with a nonce from the system's random source.
Challenge make_challenge();
// HMAC-SHA256 under `token` of the purpose ("store", or a transport's name), the challenge, and
// `message`.
Mac answer(const std::string& token, std::string_view purpose, const Challenge& challenge,
           std::string_view message = {});
// Constant-time comparison.
bool same(const Mac& a, const Mac& b);
// 32 random bytes in hex, for launchers.
std::string new_token();

}  // namespace arcoll::auth
