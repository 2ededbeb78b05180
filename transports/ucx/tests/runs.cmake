# Between emulated hosts (network namespaces, tests/cluster): every algorithm through the
# correctness suite over UCX's TCP (UCX would find the hosts' shared /dev/shm otherwise).
add_test(NAME cluster.ucx_2x2
         COMMAND env ARCOLL_TRANSPORT=ucx UCX_TLS=tcp bash ${CMAKE_SOURCE_DIR}/scripts/cluster.sh
                 --hosts 2 --ranks-per-host 2 --quiet -- $<TARGET_FILE:arcoll_cluster_rank>)
set_tests_properties(cluster.ucx_2x2 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# The mixed run (tests/CMakeLists.txt) with UCX across the 2 emulated hosts and arcoll's shared
# memory within each: shm+ucx, how a cluster whose network UCX reaches is run.
set(ucx_across_hosts_environment "${mixed_run_environment} ARCOLL_TRANSPORT=shm+ucx")
gtest_discover_tests(arcoll_mp_tests TEST_PREFIX "mixed-ucx." DISCOVERY_TIMEOUT 60
                     TEST_FILTER "${mixed_run_filter}"
                     PROPERTIES TIMEOUT 300
                     ENVIRONMENT "ARCOLL_TEST_ENVIRONMENT=${ucx_across_hosts_environment}")
# And the kill trials and faults, which run on 2 emulated hosts of their own: a rank killed, an
# abort, a silent rank, a corrupted message and mismatched counts, with UCX across the hosts.
gtest_discover_tests(arcoll_mp_tests TEST_PREFIX "mixed-ucx." DISCOVERY_TIMEOUT 60
                     TEST_FILTER "${cases_of_one_transport}"
                     PROPERTIES TIMEOUT 300
                     ENVIRONMENT "ARCOLL_TEST_ENVIRONMENT=ARCOLL_TRANSPORT=shm+ucx")
# A UCX communicator and a TCP one in turn between emulated hosts on 1 Gbit/s links, where UCX
# holds sends: a rank must answer its peers' flushes of a UCX call it left while it waits in
# the TCP one (parked, transports/common/parked.hpp). Before: a timeout in 5 of 7 runs.
add_test(NAME cluster.ucx_beside_tcp_2x2
         COMMAND env UCX_TLS=tcp ARCOLL_TIMEOUT=20 bash ${CMAKE_SOURCE_DIR}/scripts/cluster.sh
                 --hosts 2 --ranks-per-host 2 --rate 1gbit --quiet -- $<TARGET_FILE:arbench>
                 --transport tcp,ucx -b 4K -e 64K -f 4 -n 20 --repeat 3)
set_tests_properties(cluster.ucx_beside_tcp_2x2 PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
# Copies of calls beyond the caches to a peer of this machine are announced and go in pieces
# once their receiver clears them (UcxTransport::announce): every call here is beyond the
# caches, as only calls on 16 MiB and more are by default, on 2 and 3 ranks.
gtest_discover_tests(arcoll_mp_tests TEST_PREFIX "ucx-streaming." DISCOVERY_TIMEOUT 60
                     TEST_FILTER "*CollectiveWorld.Reduce*/2:*CollectiveWorld.Reduce*/3:*AlgorithmWorld*/ring_2ranks"
                     PROPERTIES TIMEOUT 300
                     ENVIRONMENT "ARCOLL_TEST_ENVIRONMENT=ARCOLL_TRANSPORT=ucx ARCOLL_STREAMING_BYTES=0 ARCOLL_COPY_STREAMING_BYTES=0")
