#include "src/base/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdio>
#include <vector>

#include "arcoll/error.hpp"

namespace arcoll::auth {
namespace {

void random_bytes(std::uint8_t* out, std::size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1)
    throw SystemError("authentication", "the system's random source failed");
}

}  // namespace

Challenge make_challenge() {
  Challenge c{kChallengeMagic, 1, {}};
  random_bytes(c.nonce.data(), c.nonce.size());
  return c;
}

Mac answer(const std::string& token, std::string_view purpose, const Challenge& challenge,
           std::string_view message) {
  std::vector<std::uint8_t> data(purpose.begin(), purpose.end());
  data.push_back(0);
  const auto* c = reinterpret_cast<const std::uint8_t*>(&challenge);
  data.insert(data.end(), c, c + sizeof challenge);
  data.insert(data.end(), message.begin(), message.end());
  Mac mac{};
  unsigned length = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), data.data(), data.size(),
           mac.data(), &length) == nullptr ||
      length != mac.size())
    throw SystemError("authentication", "HMAC-SHA256 failed");
  return mac;
}

bool same(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string new_token() {
  std::array<std::uint8_t, 32> bytes{};
  random_bytes(bytes.data(), bytes.size());
  std::string hex;
  char two[3];
  for (std::uint8_t b : bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

}  // namespace arcoll::auth
