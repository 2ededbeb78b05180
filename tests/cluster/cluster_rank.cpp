// One rank of the emulated cluster (scripts/cluster.sh starts one per rank, each host a network
// namespace): every all-reduce algorithm through the whole correctness suite, the registry's
// transports within a host and across the namespaces' links.
#include <gtest/gtest.h>

#include <cstdlib>

#include "arcoll/communicator.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

TEST(ClusterRank, EveryAlgorithmTypeOpAndCountMatchesReference) {
  const char* hosts = std::getenv("CLUSTER_HOSTS");
  const char* per_host = std::getenv("CLUSTER_RANKS_PER_HOST");
  if (hosts == nullptr || per_host == nullptr) GTEST_SKIP() << "started by scripts/cluster.sh only";
  auto comm = Communicator::from_env();
  EXPECT_EQ(comm->node_count(), std::atoi(hosts));
  EXPECT_EQ(comm->local_size(), std::atoi(per_host));
  EXPECT_EQ(comm->transport_name(), expected_transport(*comm));
  for (const std::string& algorithm : Communicator::allreduce_algorithms()) {
    SCOPED_TRACE("algorithm " + algorithm);
    comm->set_algorithm(algorithm);
    check_allreduce(*comm, 6, Coverage::sampled);
  }
}

}  // namespace
}  // namespace arcoll::testing
