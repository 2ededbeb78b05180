// Who is still there after a failure: the live ranks of a communicator agree on its members
// (Communicator::shrink()), over connections of their own, since the communicator's transports
// and rank 0's store may have gone with the rank that failed.
//
// The agreement is flooding consensus with a perfect failure detector (Cachin, Guerraoui and
// Rodrigues, "Introduction to Reliable and Secure Distributed Programming", algorithm 5.1):
// each rank floods the proposals it knows, round after round, until a round hears from the
// same ranks as the one before; it then decides on the proposals it holds and floods the
// decision, which a rank still in a round adopts. It decides within a round of the last
// failure, whatever fails during it, which is what ULFM's agreement also promises; it needs
// no coordinator (whose death would need a second protocol) and its rounds are one message
// to each live rank. The members are the ranks whose proposal is in the decision.
//
// The detector is made perfect by exclusion: a closed connection or a refused one is a death,
// and so is the end of a peer's process on this machine (watched through a pidfd taken while
// it was a member: a dead rank's port, taken meanwhile by another program, still accepts);
// a rank silent past the deadline is told it is excluded and cut off, so that if it was only
// slow it finds, when it comes back, that it is out (an error, never a member), and behaves as
// dead to the others from then on. A rank that dies after its proposal reached some ranks may
// still be decided a member: building the new communicator then fails, and the caller agrees
// again (shrink() does), in a new epoch of which old connections are no part.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "src/base/socket.hpp"

namespace arcoll {

class Survivors {
 public:
  // Listens on `address` (a port the kernel picks) for the other ranks' connections.
  Survivors(int rank, int size, const std::string& address);
  ~Survivors();
  Survivors(const Survivors&) = delete;
  Survivors& operator=(const Survivors&) = delete;
  // "address port identity": where the other ranks find this one, and which process it is;
  // every rank's, in rank order, with the job's id and token (which authenticates the
  // connections), once the ranks have met.
  std::string endpoint() const;
  void meet(const std::vector<std::string>& endpoints, std::uint64_t job_id, std::string token);
  // What the live ranks agreed: the members (ranks of the communicator, ascending) and what
  // each offered (shrink(): where its store would listen, should it lead).
  struct Decision {
    std::vector<int> members;
    std::map<int, std::string> offers;
  };
  // Agrees with the other live ranks, offering `offer`; within `deadline`, then a grace of
  // moments for the rounds that follow the exclusion of the silent ranks. Throws PeerError
  // when this rank is not among the members (another rank excluded it), TimeoutError when the
  // rounds do not end.
  Decision agree(const std::string& offer, net::Clock::time_point deadline);
  // Closes the listener: the ranks that agree from now on find this one gone at once (an
  // aborted communicator takes no part).
  void leave();
  // After agree(): the first of `members` that this rank saw fail during the agreement (after
  // its proposal went out), or whose connection to this rank closes before `until` (it died
  // while the communicator of the members was being built); -1 for none. One thread at a time.
  int first_closed(const std::vector<int>& members, net::Clock::time_point until);

 private:
  struct Peer;
  struct Epoch;
  int rank_;
  int size_;
  net::Fd listener_;
  // By rank, from the endpoints the ranks met with: where each listens, and a pidfd of each
  // peer on this machine (else none).
  std::vector<net::Endpoint> addresses_;
  std::vector<net::Fd> processes_;
  std::uint64_t job_id_ = 0;
  std::string token_;
  std::uint64_t epoch_ = 0;  // agreements begun
  // Connections accepted for an epoch this rank has yet to begin (a peer that began it first).
  std::map<std::uint64_t, std::vector<std::pair<int, net::Fd>>> early_;
  // Connections accepted before the last agreement ended whose hello had not all come, with
  // what had: the next agreement reads them (a peer that began it first may have made one).
  std::vector<std::pair<net::Fd, std::string>> unidentified_;
  // The last agreement's connections: kept open until the next one, or the end, so that what
  // this rank sent last (its decision, an exclusion) is read before the connection closes:
  // those of the silenced ranks, and those with the members by rank, sent on and received on
  // (first_closed() watches them).
  std::vector<net::Fd> kept_;
  std::map<int, net::Fd> kept_out_;
  std::map<int, net::Fd> kept_in_;
  std::set<int> failed_;  // the ranks the last agreement saw fail (or silenced)
  int fault_point_ = -1;  // ARCOLL_FAULT_AGREEMENT for this rank (tests): its round, -1 none
  bool fault_unheard_ = false;
};

}  // namespace arcoll
