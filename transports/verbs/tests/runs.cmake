# Between emulated hosts (network namespaces, tests/cluster): every algorithm through the
# correctness suite over the emulated device.
add_test(NAME cluster.verbs_2x2
         COMMAND env ARCOLL_TRANSPORT=verbs ARCOLL_VERBS_DEVICE=emulated bash
                 ${CMAKE_SOURCE_DIR}/scripts/cluster.sh --hosts 2 --ranks-per-host 2 --quiet --
                 $<TARGET_FILE:arcoll_cluster_rank>)
set_tests_properties(cluster.verbs_2x2 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
