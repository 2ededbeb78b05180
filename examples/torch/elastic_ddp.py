"""DDP training that carries on when a rank dies, from the survivors' weights in memory (no
checkpoint): the failed step raises, the survivors shrink the group to themselves, build DDP
again on it, re-shard the data among themselves and redo the step. With --rejoin-step, a
replacement started at the beginning waits to join, and the survivors admit it at that step.

    PYTHONPATH=build/python python3 examples/torch/elastic_ddp.py --np 4 --kill-rank 2 \
        --kill-step 100 --rejoin-step 200

Each survivor's rank and the group's size change; the model, the optimizer's state and the
step count are the survivors' own (DDP keeps the replicas equal, so every survivor holds the
same weights when the step fails)."""
import argparse
import datetime
import os
import signal
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import arcoll_torch


def shard(step, batch, rank, size):
    """This rank's share of the step's global batch (synthetic data, the same for every rank)."""
    generator = torch.Generator().manual_seed(step)
    images = torch.randn(batch * size, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (batch * size,), generator=generator)
    return images[rank::size], labels[rank::size]


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(16 * 12 * 12, 10))


def train(rank, args):
    if rank < 0:  # the replacement: it joins when the survivors grow, and takes their step
        group = arcoll_torch.join(dist.FileStore(args.store, -1))
        step = torch.zeros(1, dtype=torch.int64)
        dist.broadcast(step, 0, group=group)
        print(f"replacement: joined as rank {group.rank()} of {group.size()} at step "
              f"{step.item()}", flush=True)
        run(rank, args, group, int(step.item()))
        return
    dist.init_process_group("arcoll", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=args.np, timeout=datetime.timedelta(seconds=30))
    run(rank, args, dist.group.WORLD, 0)


def run(rank, args, group, step):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ddp = DDP(model, process_group=group)  # the weights of the group's rank 0
    while step < args.steps:
        if step == args.rejoin_step and rank >= 0 and group.size() < args.np:
            group = arcoll_torch.grow(dist.FileStore(args.store, -1), 1, group)
            dist.broadcast(torch.tensor([step]), 0, group=group)
            ddp = DDP(model, process_group=group)
            print(f"rank {rank}: the replacement joined; {group.size()} ranks", flush=True)
        if rank == args.kill_rank and step == args.kill_step:
            os.kill(os.getpid(), signal.SIGKILL)
        images, labels = shard(step, args.batch, group.rank(), group.size())
        try:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(images), labels)
            loss.backward()
            optimizer.step()
        except RuntimeError as failure:
            started = time.monotonic()
            group = arcoll_torch.shrink(group)
            ddp = DDP(model, process_group=group)
            print(f"rank {rank}: step {step} failed ({str(failure).splitlines()[0]}); now rank "
                  f"{group.rank()} of {group.size()}, {time.monotonic() - started:.3f} s later",
                  flush=True)
            continue  # the same step again, among the survivors
        if group.rank() == 0 and step % 50 == 0:
            print(f"step {step}: loss {loss.item():.4f} on {group.size()} ranks", flush=True)
        step += 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--kill-rank", type=int, default=2)
    parser.add_argument("--kill-step", type=int, default=100)
    parser.add_argument("--rejoin-step", type=int, default=-1,
                        help="the step at which a replacement joins (-1: none)")
    parser.add_argument("--port", type=int, default=29573)
    args = parser.parse_args()
    args.store = os.path.join(tempfile.mkdtemp(), "store")  # where the replacement learns where to join
    ranks = list(range(args.np)) + ([-1] if args.rejoin_step >= 0 else [])
    processes = [mp.get_context("spawn").Process(target=train, args=(r, args)) for r in ranks]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    print("exit codes:", [p.exitcode for p in processes])
