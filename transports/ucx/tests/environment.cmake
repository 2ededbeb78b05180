# Reduce's algorithms on 2 and 5 ranks only: each UCX job takes about 2 s to start under the
# sanitizers, and the algorithms are the same over every transport (the shm and tcp runs take
# every world of 1 to 8).
set(TRANSPORT_RUN_FILTER "-*ReduceWorld*_1ranks:*ReduceWorld*_3ranks:*ReduceWorld*_4ranks:*ReduceWorld*_6ranks:*ReduceWorld*_7ranks:*ReduceWorld*_8ranks")
