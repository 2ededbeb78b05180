# The algorithms are the same over every transport: the shm run takes every world of 1 to 8
# through each of them, here 1 to 5 and 8 (sockets to 7 peers are made as to 4 or to 8).
set(TRANSPORT_RUN_FILTER "-*AlgorithmWorld*_6ranks:*AlgorithmWorld*_7ranks")
