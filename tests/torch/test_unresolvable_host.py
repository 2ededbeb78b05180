"""A job on a host whose own name does not resolve, as in many containers: the ranks run in
network and UTS namespaces of their own, with loopback only and a host name that no resolver
knows. The backend publishes the address of an interface, never the name, with every init
method (env, tcp, file) and over every transport of this build (verbs on its emulated device).
Skipped (exit 77) where namespaces cannot be made.

Usage: PYTHONPATH=build/python python3 tests/torch/test_unresolvable_host.py"""
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402
import arcoll_torch  # noqa: E402

HOST_NAME = "arcoll-host-no-resolver-knows"


def body(rank, size, transport):
    t = torch.arange(257, dtype=torch.float32) + rank
    dist.all_reduce(t)
    want = torch.arange(257, dtype=torch.float32) * size + size * (size - 1) / 2
    assert torch.equal(t, want), f"all_reduce over {transport}"
    peer = (rank + 1) % size
    got = torch.empty(5)
    if rank == 0:
        dist.send(torch.full((5,), 7.0), peer)
        dist.recv(got, size - 1)
    else:
        dist.recv(got, rank - 1)
        dist.send(torch.full((5,), 7.0), peer)
    assert torch.all(got == 7.0), f"send/recv over {transport}"


def inside():
    try:
        socket.gethostbyname(socket.gethostname())
    except OSError:
        pass
    else:
        raise AssertionError(f"{socket.gethostname()} resolves: the test would prove nothing")
    # The link costs are not what is tested: calibrating would keep a file per build under this
    # made-up host's name in the user's cache.
    os.environ["ARCOLL_CALIBRATE"] = "off"
    # Every transport and every init method, each at least once.
    transports, inits = arcoll_torch.transports(), ["tcp", "file", "env"]
    runs = [(transports[i % len(transports)], inits[i % len(inits)])
            for i in range(max(len(transports), len(inits)))]
    for transport, init in runs:
        for name in ("MASTER_ADDR", "MASTER_PORT"):  # set by an env:// run only
            os.environ.pop(name, None)
        os.environ["ARCOLL_TRANSPORT"] = transport
        if transport == "verbs":
            os.environ["ARCOLL_VERBS_DEVICE"] = "emulated"
        harness.run(body, 2, transport, init=init)
        print(f"{transport} with {init}:// init on host {socket.gethostname()}: ok", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--inside"]:
        inside()
        sys.exit(0)
    setup = f"ip link set lo up && hostname {HOST_NAME} && exec \"$0\" \"$1\" --inside"
    try:
        done = subprocess.run(["unshare", "--uts", "--net", "sh", "-c", setup, sys.executable,
                               os.path.abspath(__file__)], capture_output=True, text=True,
                              timeout=240)
    except FileNotFoundError:
        print("SKIP: no unshare here")
        sys.exit(77)
    print(done.stdout + done.stderr)
    if done.returncode != 0 and "unshare failed" in done.stderr:
        print("SKIP: cannot make namespaces here (not root?)")
        sys.exit(77)
    assert done.returncode == 0, f"the job in the namespace exited {done.returncode}"
    print("a host whose name does not resolve: ok")
