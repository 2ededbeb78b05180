"""The "arcoll" backend under torchrun (env:// from torchrun's variables), as a user starts a
training script: torchrun --nproc_per_node 2 --redirects 1 --tee 1 script.py. Each rank
all-reduces, broadcasts and all-gathers and checks the results; the launcher's exit code and
every rank's line are checked.

Usage: PYTHONPATH=build/python python3 tests/torch/test_torchrun.py"""
import os
import re
import subprocess
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402


def rank_main():
    import arcoll_torch  # noqa: F401  (registers the "arcoll" backend)
    dist.init_process_group("arcoll")  # env:// from torchrun's RANK, WORLD_SIZE, MASTER_*
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.arange(1000, dtype=torch.float32) + rank
    dist.all_reduce(t)
    want = torch.arange(1000, dtype=torch.float32) * size + size * (size - 1) / 2
    assert torch.equal(t, want), "all_reduce under torchrun"
    b = torch.full((17,), float(rank))
    dist.broadcast(b, src=size - 1)
    assert torch.all(b == size - 1), "broadcast under torchrun"
    gathered = [torch.empty(3, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(gathered, torch.full((3,), rank, dtype=torch.int64))
    assert all(torch.all(g == r) for r, g in enumerate(gathered)), "all_gather under torchrun"
    print(f"torchrun rank {rank} of {size}: ok ({dist.get_backend()})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "TORCHELASTIC_RUN_ID" in os.environ:
        rank_main()
        sys.exit(0)
    try:  # torchrun's own store, whatever the backend
        dist.TCPStore("127.0.0.1", 0, is_master=True)
    except RuntimeError as e:
        if "libuv" not in str(e):
            raise
        # Debian 13's torch lacks libuv, and torchrun's rendezvous asks for it whatever
        # USE_LIBUV says: torchrun cannot start any job there.
        print(f"SKIP: torchrun cannot run on this torch ({e})")
        sys.exit(77)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--redirects", "1", "--tee", "1", "--master_addr", "127.0.0.1",
               "--master_port", str(harness.free_port()), os.path.abspath(__file__)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    print(done.stdout + done.stderr)
    assert done.returncode == 0, f"torchrun exited {done.returncode}"
    for rank in (0, 1):
        assert re.search(rf"torchrun rank {rank} of 2: ok \(arcoll\)", done.stdout), rank
    print("torch under torchrun: ok")
