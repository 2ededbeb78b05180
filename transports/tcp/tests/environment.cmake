# The algorithms are the same over every transport: the shm run takes every world of 1 to 8
# through each of them, here all but 6 (sockets to 5 peers are made as to 4 or to 6).
set(TRANSPORT_RUN_FILTER "-*AlgorithmWorld*_6ranks")
