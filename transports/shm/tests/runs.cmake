# Large shm messages copied through the rings instead of read across processes (worlds of
# 2, 3, 5 and 8 ranks), the fragments each rank sends written there with streaming stores, as
# they are by default only while a peer's core is far. In both runs every call lands what it
# receives with streaming stores, as only calls on 16 MiB and more do by default.
gtest_discover_tests(arcoll_mp_tests TEST_PREFIX "shm-staged." DISCOVERY_TIMEOUT 60
                     TEST_FILTER "*AlgorithmWorld*/ring_*:*AlgorithmWorld*/tree_*:*CollectiveWorld*:*PointToPoint*-*_1ranks:*_4ranks:*_6ranks:*_7ranks"
                     PROPERTIES TIMEOUT 300
                     ENVIRONMENT "ARCOLL_TEST_ENVIRONMENT=ARCOLL_TRANSPORT=shm ARCOLL_SHM_SINGLE_COPY=0 ARCOLL_SHM_RING_STORES=streaming ARCOLL_STREAMING_BYTES=0 ARCOLL_COPY_STREAMING_BYTES=0")
# Every message but the smallest read across processes, as only the largest are by default.
gtest_discover_tests(arcoll_mp_tests TEST_PREFIX "shm-single-copy." DISCOVERY_TIMEOUT 60
                     TEST_FILTER "*AlgorithmWorld*/ring_*:*AlgorithmWorld*/halving_doubling_*:*CollectiveWorld*:*PointToPoint*-*_1ranks:*_4ranks:*_6ranks:*_7ranks"
                     PROPERTIES TIMEOUT 300
                     ENVIRONMENT "ARCOLL_TEST_ENVIRONMENT=ARCOLL_TRANSPORT=shm ARCOLL_SHM_SINGLE_COPY_BYTES=4K ARCOLL_SHM_SINGLE_COPY_PIPELINED_BYTES=4K ARCOLL_STREAMING_BYTES=0 ARCOLL_COPY_STREAMING_BYTES=0")
