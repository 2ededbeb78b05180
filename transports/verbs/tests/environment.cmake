# No RDMA hardware where the suite runs: the verbs run goes over the emulated device, which
# moves bytes between the ranks' processes as an HCA would (transports/verbs/device.hpp).
set(TRANSPORT_RUN_ENVIRONMENT "ARCOLL_VERBS_DEVICE=emulated")
