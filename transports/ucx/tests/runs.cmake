# Between emulated hosts (network namespaces, tests/cluster): every algorithm through the
# correctness suite over UCX's TCP (UCX would find the hosts' shared /dev/shm otherwise).
add_test(NAME cluster.ucx_2x2
         COMMAND env ARCOLL_TRANSPORT=ucx UCX_TLS=tcp bash ${CMAKE_SOURCE_DIR}/scripts/cluster.sh
                 --hosts 2 --ranks-per-host 2 --quiet -- $<TARGET_FILE:arcoll_cluster_rank>)
set_tests_properties(cluster.ucx_2x2 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
