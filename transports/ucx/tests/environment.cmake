# The algorithms are the same over every transport: the shm run takes every world of 1 to 8
# (the tcp run all but all-reduce's 6): here all-reduce's on 1 to 5 and 8 ranks, reduce's on 2
# and 5, the other collectives' on 1 to 5 and 8. Not here either, as on the verbs run: what
# sits above the point-to-point calls and reaches the transport only through them (the
# parameter server, the wire formats' conversions), which the shm and tcp runs cover: 49 of
# this run's 300 s of test time.
set(TRANSPORT_RUN_FILTER "-*CollectiveWorld.*/6:*CollectiveWorld.*/7:*AlgorithmWorld*_6ranks:*AlgorithmWorld*_7ranks:*ReduceWorld*_1ranks:*ReduceWorld*_3ranks:*ReduceWorld*_4ranks:*ReduceWorld*_6ranks:*ReduceWorld*_7ranks:*ReduceWorld*_8ranks:ParameterServer.*:*BspWorld*:*AsynchronousWorld*:*WireWorld*")
