"""How long torchrun's elastic agent takes to bring a data-parallel training back after a rank
dies: the peer figure of arcoll's shrink() (build/bench/recovery_bench, arbench train --elastic).
Each rank trains a small CNN on random Fashion-MNIST-shaped batches with DDP; in the first
attempt, rank --kill-rank SIGKILLs itself at step --kill-step; the agent stops the others and
starts every rank again (--max_restarts 1), which join a new process group, build DDP again and
step on. Rank 0 of the second attempt prints the time from the kill to its first completed step.

    torchrun --nproc_per_node 4 --max_restarts 1 --redirects 1 --tee 1 \\
        bench/torchrun_restart.py --backend gloo --kill-rank 2 --kill-step 30
"""
import argparse
import os
import signal
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--kill-rank", type=int, default=2)
    parser.add_argument("--kill-step", type=int, default=30)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--moments", default=os.path.join(tempfile.gettempdir(),
                                                          "torchrun-restart-kill-time"))
    args = parser.parse_args()
    if args.backend == "arcoll":
        import arcoll_torch  # noqa: F401  (registers the backend)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 4 * 4, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(args.steps):
        if attempt == 0 and rank == args.kill_rank and step == args.kill_step:
            with open(args.moments, "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        images = torch.randn(args.batch, 1, 28, 28)
        labels = torch.randint(0, 10, (args.batch,))
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(ddp(images), labels).backward()
        optimizer.step()
        if attempt > 0 and step == 0 and rank == 0:
            with open(args.moments) as f:
                killed = float(f.read())
            print(f"torchrun restart: attempt {attempt}, first step done "
                  f"{time.time() - killed:.2f} s after rank {args.kill_rank} was killed",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
