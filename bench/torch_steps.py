#!/usr/bin/env python3
"""Training step time of a small CNN (torch's MNIST example network: 1.2 M parameters, 4.8 MB
of gradients) under DDP and, on torch 2.x, FSDP, through arcoll, torch's Gloo and (--mpi)
torch's MPI backend, each backend in a job of its own (--rounds rounds of --steps steps); --runs
runs, in each the backends' jobs one after another, each run starting with the next backend, so
that drift hits all of them alike. Synthetic data, one thread per rank. Prints per wrapper and
backend the median step time over all rounds (each round's median over its steps, the slowest
rank's), the fastest and slowest round, and the step time over arcoll's.

    PYTHONPATH=build/python python3 bench/torch_steps.py --np 2
    PYTHONPATH=build-debian13/python python3 bench/torch_steps.py --np 2 --mpi   (torch 2.x)

FSDP runs on arcoll and Gloo only: torch's MPI backend refuses the reduce-scatter it makes
("Backend mpi does not support _reduce_scatter_base", torch 2.6).

The ranks run with glibc's malloc thresholds fixed (README, torch section), unless the
environment sets GLIBC_TUNABLES or --malloc as-is says not to: torch 2.6's step times, where a
page's first touch is dear (a VM), otherwise swung up to 4x from job to job for every backend,
as glibc's adaptive mmap threshold sent torch's per-step tensors to fresh mappings or not."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_ranks

TORCH_2 = int(torch.__version__.split(".")[0]) >= 2
STEADY_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"


def network():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(9216, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


def wrapped(kind, group):
    torch.manual_seed(0)
    if kind == "ddp":
        return DDP(network(), process_group=group)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    return FSDP(network(), process_group=group, device_id=torch.device("cpu"),
                use_orig_params=True)


def step_seconds(model, optimizer, batch, steps, generator):
    """Median time of `steps` steps, the slowest rank's."""
    times = []
    for _ in range(steps):
        x = torch.randn(batch, 1, 28, 28, generator=generator)
        y = torch.randint(0, 10, (batch,), generator=generator)
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    slowest = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item()


def rank_main(rank, args, backend, rendezvous, out):
    torch_ranks.init(rank, args.np, rendezvous, backend)
    # torch's MPI backend refuses FSDP's reduce-scatter
    kinds = [kind for kind in (["ddp", "fsdp"] if TORCH_2 else ["ddp"])
             if not (kind == "fsdp" and backend == "mpi")]
    result = {}
    for kind in kinds:
        model = wrapped(kind, dist.group.WORLD)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        generator = torch.Generator().manual_seed(rank)
        step_seconds(model, optimizer, args.batch, 3, generator)  # untimed: buffers, connections
        result[kind] = [step_seconds(model, optimizer, args.batch, args.steps, generator)
                        for _ in range(args.rounds)]
    torch_ranks.finish(rank, out, result, backend)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    torch_ranks.add_arguments(parser)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per job")
    parser.add_argument("--runs", type=int, default=1, help="runs, each a job per backend")
    parser.add_argument("--malloc", choices=["steady", "as-is"], default="steady",
                        help="steady: the ranks run with glibc's malloc thresholds fixed "
                             f"(GLIBC_TUNABLES={STEADY_MALLOC}) unless GLIBC_TUNABLES is set")
    args = parser.parse_args()
    if args.malloc == "steady":
        os.environ.setdefault("GLIBC_TUNABLES", STEADY_MALLOC)  # read as each rank starts
    tunables = os.environ.get("GLIBC_TUNABLES", "none")
    result = {}  # wrapper -> backend -> every round's step time
    for number in range(args.runs):
        for backend in torch_ranks.in_turn(args, number):
            job = torch_ranks.run(rank_main, args, backend)
            if job is None:
                return 0  # a rank under mpirun
            for kind, rounds in job.items():
                result.setdefault(kind, {}).setdefault(backend, []).extend(rounds)
    print(f"# step time (ms) of torch's MNIST CNN, {args.np} ranks, batch {args.batch} per rank, "
          f"torch {torch.__version__}: median of {args.runs} x {args.rounds} rounds of {args.steps} "
          f"steps (fastest - slowest round); over arcoll's median; "
          f"GLIBC_TUNABLES: {tunables}")
    for kind, rounds in result.items():
        arcoll = statistics.median(rounds["arcoll"])
        for name, seconds in rounds.items():
            median = statistics.median(seconds)
            print(f"  {kind:5} {name:7} {median * 1e3:8.2f} ms  ({min(seconds) * 1e3:.2f} - "
                  f"{max(seconds) * 1e3:.2f})  x{median / arcoll:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
