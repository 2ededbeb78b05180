#!/usr/bin/env python3
"""Training step time of a small CNN (torch's MNIST example network: 1.2 M parameters, 4.8 MB
of gradients) under DDP and, on torch 2.x, FSDP, through arcoll, torch's Gloo and (--mpi)
torch's MPI backend, in the same ranks: each backend wraps its own copy of the model, and they
take turns (--rounds times, --steps steps each) so that drift hits all of them alike. Synthetic
data, one thread per rank. Prints per wrapper and backend the median step time over the rounds
(each round's median over its steps, the slowest rank's), the fastest and slowest round, and
the step time over arcoll's.

    PYTHONPATH=build/python python3 bench/torch_steps.py --np 2
    PYTHONPATH=build-debian13/python python3 bench/torch_steps.py --np 2 --mpi   (torch 2.x)

FSDP runs on arcoll and Gloo only: torch's MPI backend refuses the reduce-scatter it makes
("Backend mpi does not support _reduce_scatter_base", torch 2.6)."""
import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_ranks

TORCH_2 = int(torch.__version__.split(".")[0]) >= 2


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
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # on arcoll, whichever backend was timed
    return slowest.item()


def rank_main(rank, args, rendezvous, out):
    groups = torch_ranks.groups(rank, args.np, rendezvous, args.mpi)
    kinds = ["ddp", "fsdp"] if TORCH_2 else ["ddp"]
    result = {}
    for kind in kinds:
        backends = [name for name in groups if not (kind == "fsdp" and name == "mpi")]
        models = {name: wrapped(kind, groups[name]) for name in backends}
        optimizers = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in models.items()}
        generator = torch.Generator().manual_seed(rank)
        for name in backends:  # a first round untimed: buffers allocated, connections made
            step_seconds(models[name], optimizers[name], args.batch, 3, generator)
        rounds = {name: [] for name in backends}
        for _ in range(args.rounds):
            for name in backends:
                rounds[name].append(step_seconds(models[name], optimizers[name], args.batch,
                                                 args.steps, generator))
        result[kind] = rounds
    torch_ranks.write(rank, out, result)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    torch_ranks.add_arguments(parser)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5, help="turns of every backend")
    args = parser.parse_args()
    result = torch_ranks.run(rank_main, args)
    if result is None:
        return 0  # a rank under mpirun
    print(f"# step time (ms) of torch's MNIST CNN, {args.np} ranks, batch {args.batch} per rank, "
          f"torch {torch.__version__}: median of {args.rounds} rounds of {args.steps} steps "
          f"(fastest - slowest round); over arcoll's median")
    for kind, rounds in result.items():
        arcoll = statistics.median(rounds["arcoll"])
        for name, seconds in rounds.items():
            median = statistics.median(seconds)
            print(f"  {kind:5} {name:7} {median * 1e3:8.2f} ms  ({min(seconds) * 1e3:.2f} - "
                  f"{max(seconds) * 1e3:.2f})  x{median / arcoll:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
