#!/usr/bin/env python3
"""torch.distributed.all_reduce through arcoll and through torch's Gloo (and with --mpi torch's
MPI backend, where torch has it: the ranks then start under mpirun), size by size in the same
ranks (the groups take turns at each size, --repeat times; medians), float32 sum; then, with
--arbench, the same sizes through arbench (its median of --repeat), to show what the torch
backend adds over the library.

    PYTHONPATH=build/python python3 bench/torch_allreduce.py --np 2 --arbench build/bench/arbench
    PYTHONPATH=build/python python3 bench/torch_allreduce.py --np 2 --mpi    (torch 2.x)
    PYTHONPATH=build/python python3 bench/torch_allreduce.py --np 2 --shared-tensors

With --shared-tensors, arcoll also takes a turn on a tensor made under
arcoll_torch.share_cpu_tensors (zero-copy buckets): "arcoll+shared".

Prints per size: each backend's time and busbw (nccl-tests' definition, 2(n-1)/n x size/time),
arcoll's busbw over each other backend's, and arcoll-through-torch's busbw over arbench's."""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import arcoll_torch  # registers the "arcoll" backend


def sizes(low, high, factor):
    size = low
    while size <= high:
        yield size
        size *= factor


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def timed(group, tensor, seconds):
    """Mean time of one all_reduce, iterations chosen to last about `seconds`."""
    dist.all_reduce(tensor, group=group)
    start = time.perf_counter()
    dist.all_reduce(tensor, group=group)
    once = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(once, op=dist.ReduceOp.MAX)  # every rank runs the same number of calls
    iterations = max(3, min(1000, int(seconds / max(once.item(), 1e-6))))
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor, group=group)
    return (time.perf_counter() - start) / iterations


def rank_main(rank, size, args, rendezvous, out):
    torch.set_num_threads(1)
    dist.init_process_group("arcoll", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=300))
    groups = {"arcoll": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    if args.mpi:
        groups["mpi"] = dist.new_group(backend="mpi")
    if args.shared_tensors:
        groups["arcoll+shared"] = dist.group.WORLD
    rows = []
    for nbytes in sizes(parse_size(args.b), parse_size(args.e), args.f):
        tensor = torch.ones(nbytes // 4)
        tensors = {name: tensor for name in groups}
        if args.shared_tensors:
            arcoll_torch.share_cpu_tensors(1)
            tensors["arcoll+shared"] = torch.ones(nbytes // 4)
            arcoll_torch.share_cpu_tensors(0)
        row = {"bytes": nbytes}
        times = {name: [] for name in groups}
        for _ in range(args.repeat):  # the backends take turns, so that drift hits both
            for name, group in groups.items():
                seconds = torch.tensor([timed(group, tensors[name], args.seconds)],
                                       dtype=torch.float64)
                dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank's
                times[name].append(seconds.item())
        for name, measured in times.items():
            row[name] = statistics.median(measured)
        rows.append(row)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def arbench_busbw(arbench, ranks, args):
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "run.json")
        subprocess.run([arbench, "--np", str(ranks), "-b", args.b, "-e", args.e, "-f", str(args.f),
                        "-n", "20", "--repeat", str(args.repeat), "--json", path], check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            return {r["size_bytes"]: r["in_place"]["busbw_gbs"] for r in json.load(f)["rows"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("-b", default="4K")
    parser.add_argument("-e", default="256M")
    parser.add_argument("-f", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=0.3, help="timing per size and backend")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timings per size and backend, turn by turn; the median is shown")
    parser.add_argument("--arbench", help="arbench to compare with (its in-place busbw)")
    parser.add_argument("--mpi", action="store_true",
                        help="torch's MPI backend too: the ranks start under mpirun")
    parser.add_argument("--shared-tensors", action="store_true",
                        help="arcoll also on a tensor in shared memory (zero-copy buckets)")
    parser.add_argument("--rank-of", nargs=2, metavar=("RENDEZVOUS", "OUT"),
                        help=argparse.SUPPRESS)  # a rank under mpirun
    args = parser.parse_args()
    if args.rank_of:
        rank_main(int(os.environ["OMPI_COMM_WORLD_RANK"]), args.np, args, *args.rank_of)
        return 0
    with tempfile.TemporaryDirectory() as work:
        rendezvous = os.path.join(work, "rendezvous")
        out = os.path.join(work, "rows.json")
        if args.mpi:
            subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.np),
                            "--mca", "btl", "self,vader", sys.executable, os.path.abspath(__file__),
                            *sys.argv[1:],
                            "--rank-of", rendezvous, out], check=True)
        else:
            mp.spawn(rank_main, args=(args.np, args, rendezvous, out), nprocs=args.np)
        with open(out) as f:
            rows = json.load(f)
    library = arbench_busbw(args.arbench, args.np, args) if args.arbench else {}
    factor = 2 * (args.np - 1) / args.np
    others = [name for name in ("arcoll+shared", "gloo", "mpi") if name in rows[0]]
    print(f"# torch.distributed.all_reduce, float32 sum, {args.np} ranks, in place; "
          f"busbw in GB/s (nccl-tests' definition)")
    print(f"# {'size':>10} {'arcoll us':>10} {'busbw':>7}"
          + "".join(f" {name + ' us':>10} {'busbw':>7} {'arcoll/' + name:>11}" for name in others)
          + (f" {'arbench':>7} {'torch/arbench':>13}" if library else ""))
    for row in rows:
        busbw = {name: row["bytes"] / row[name] / 1e9 * factor for name in ["arcoll", *others]}
        line = f"  {row['bytes']:>10} {row['arcoll'] * 1e6:>10.1f} {busbw['arcoll']:>7.2f}"
        for name in others:
            line += (f" {row[name] * 1e6:>10.1f} {busbw[name]:>7.2f} "
                     f"{busbw['arcoll'] / busbw[name]:>10.2f}x")
        if library.get(row["bytes"]):
            line += f" {library[row['bytes']]:>7.2f} {busbw['arcoll'] / library[row['bytes']]:>12.0%}"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
