# No RDMA hardware where the suite runs: the verbs run goes over the emulated device, which
# moves bytes between the ranks' processes as an HCA would (transports/verbs/device.hpp).
set(TRANSPORT_RUN_ENVIRONMENT "ARCOLL_VERBS_DEVICE=emulated")
# The algorithms on 1 to 5 ranks, the other collectives on 1 to 5 and 8: the emulated device
# under the sanitizers takes 11-15 s per world of 6 to 8, whose algorithms the shm run covers
# (7 and 8 the tcp run too; the protocol's own tests are in test_verbs.cpp). Not here either:
# what sits above the point-to-point calls and reaches the transport only through them (the
# cost model's kept calibrations, the parameter server, the wire formats' conversions), which
# the shm and tcp runs cover (the ucx run leaves them out too).
set(TRANSPORT_RUN_FILTER "-*CollectiveWorld.*/6:*CollectiveWorld.*/7:*AlgorithmWorld*_6ranks:*AlgorithmWorld*_7ranks:*AlgorithmWorld*_8ranks:*ReduceWorld*_6ranks:*ReduceWorld*_7ranks:*ReduceWorld*_8ranks:CostModel.*:ParameterServer.*:*BspWorld*:*AsynchronousWorld*:*WireWorld*")
