"""A free TCP port for a test's rendezvous, below the kernel's ephemeral range.

A port that bind(port 0) hands out lies in the ephemeral range, where every connect() of the
suite's other tests picks its local port too: in the seconds before the job binds it, one of
them can take it. Below that range only an explicit bind can, so the test's own job gets it.

Usage: free_port.py [--pair] prints a free port (with --pair, one whose successor is free too:
torchrun's store takes the port, arcoll's rendezvous the next). Python tests import free_port.
"""
import random
import socket
import sys

LOWEST = 10000


def _ephemeral_start():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(pair=False):
    end = max(_ephemeral_start() - (1 if pair else 0), LOWEST + 100)
    for _ in range(1000):
        port = random.randrange(LOWEST, end)
        if _is_free(port) and (not pair or _is_free(port + 1)):
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {end}")


if __name__ == "__main__":
    print(free_port(pair="--pair" in sys.argv[1:]))
