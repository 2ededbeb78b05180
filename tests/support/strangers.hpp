// Strangers at a job's listening ports: random bytes, truncated headers, well-formed magic
// with nonsense behind it, and handshakes under a wrong job token or none, while the job keeps
// all-reducing and checking its results. Used against the rendezvous store and against each
// transport's own listeners (transports/<name>/tests/).
#pragma once

#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "arcoll/local_launcher.hpp"
#include "src/base/socket.hpp"
#include "src/base/store.hpp"

namespace arcoll::testing {

// Connects and sends `bytes`; false when nothing listens there.
bool poke(const net::Endpoint& endpoint, const std::string& bytes);

// Every kind of garbage once at `endpoint`: random bytes of random lengths, a truncated header,
// and each of `magics` (4 bytes) followed by nonsense.
void send_garbage(const net::Endpoint& endpoint, std::mt19937& rng,
                  const std::vector<std::string>& magics);

// Answers the challenge of the listener at `endpoint` correctly, but under `token`, for
// `purpose` ("store", or the purpose a transport authenticates with), saying `said` first.
void handshake_as_stranger(const net::Endpoint& endpoint, const std::string& token,
                           const std::string& purpose, std::string_view said);

// Runs a 3-rank job that all-reduces and checks every result while a thread of rank 1 runs
// `stranger` (with a store client reading what ranks published), and a while after it has
// finished, so that every listener has seen its connections. Every rank exits 0 when all its
// results were right.
std::vector<RankExit> job_beside_stranger(
    const std::function<void(StoreClient& store, const net::Endpoint& store_address,
                             std::mt19937& rng)>& stranger);

}  // namespace arcoll::testing
