#!/usr/bin/env python3
"""torch.distributed.all_reduce through arcoll and through torch's Gloo (and with --mpi torch's
MPI backend, where torch has it: its ranks then start under mpirun), each backend in a job of
its own (every size, --repeat timings each; medians), float32 sum; --runs runs, in each the
backends' jobs one after another, each run starting with the next backend, then with --arbench
the same sizes through arbench (its median of --repeat), to show what the torch backend adds
over the library.

    PYTHONPATH=build/python python3 bench/torch_allreduce.py --np 2 --arbench build/bench/arbench
    PYTHONPATH=build/python python3 bench/torch_allreduce.py --np 2 --mpi    (torch 2.x)
    PYTHONPATH=build/python python3 bench/torch_allreduce.py --np 2 --shared-tensors --runs 5

With --shared-tensors, arcoll also takes a turn on a tensor made under
arcoll_torch.share_cpu_tensors (zero-copy buckets): "arcoll+shared".

Prints per size each backend's per-call time (min / median / max over the runs) and busbw
(nccl-tests' definition, 2(n-1)/n x size/time, of the median), then the busbw of arcoll (and
arcoll+shared) over each other backend's: the median of the runs' ratios and the lowest (a
run's ratio compares the two backends measured in it), and arcoll-through-torch's busbw over
arbench's, arbench run right after each run."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import arcoll_torch
import torch_ranks


def sizes(low, high, factor):
    size = low
    while size <= high:
        yield size
        size *= factor


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def timed(tensor, seconds):
    """Mean time of one all_reduce, iterations chosen to last about `seconds`."""
    dist.all_reduce(tensor)
    start = time.perf_counter()
    dist.all_reduce(tensor)
    once = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(once, op=dist.ReduceOp.MAX)  # every rank runs the same number of calls
    iterations = max(3, min(1000, int(seconds / max(once.item(), 1e-6))))
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    return (time.perf_counter() - start) / iterations


def rank_main(rank, args, backend, rendezvous, out):
    torch_ranks.init(rank, args.np, rendezvous, backend)
    names = [backend] + (["arcoll+shared"] if backend == "arcoll" and args.shared_tensors else [])
    rows = []
    for nbytes in sizes(parse_size(args.b), parse_size(args.e), args.f):
        tensors = {backend: torch.ones(nbytes // 4)}
        if "arcoll+shared" in names:
            arcoll_torch.share_cpu_tensors(1)
            tensors["arcoll+shared"] = torch.ones(nbytes // 4)
            arcoll_torch.share_cpu_tensors(0)
        times = {name: [] for name in names}
        for _ in range(args.repeat):  # arcoll's two tensors take turns, so that drift hits both
            for name in names:
                seconds = torch.tensor([timed(tensors[name], args.seconds)], dtype=torch.float64)
                dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank's
                times[name].append(seconds.item())
        rows.append({"bytes": nbytes, **{name: statistics.median(t) for name, t in times.items()}})
    torch_ranks.finish(rank, out, rows, backend)


def arbench_busbw(arbench, ranks, args):
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "run.json")
        subprocess.run([arbench, "--np", str(ranks), "-b", args.b, "-e", args.e, "-f", str(args.f),
                        "-n", "auto", "--repeat", str(args.repeat), "--json", path], check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            return {r["size_bytes"]: r["in_place"]["busbw_gbs"] for r in json.load(f)["rows"]}


def check_same_build(parser, arbench):
    """arcoll_torch links its own copy of arcoll: a module left from an earlier commit beside a
    fresh arbench compares two versions of the library, not torch's path against the library's.
    (Builds of one commit with different uncommitted changes both say "<commit>-dirty".)"""
    try:
        said = subprocess.run([arbench, "--version"], check=True, capture_output=True,
                              text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        parser.error(f"--arbench {arbench}: cannot run it ({e})")
    module = arcoll_torch.git_commit
    if f"(git {module})" not in said:
        first = (said.strip().splitlines() or [""])[0]
        parser.error(f"arcoll_torch ({arcoll_torch.__file__}) was built from git {module}, "
                     f"{arbench} says '{first}': build both from this tree "
                     f"(scripts/build.sh) before comparing them")


def spread(values):
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    torch_ranks.add_arguments(parser)
    parser.add_argument("-b", default="4K")
    parser.add_argument("-e", default="256M")
    parser.add_argument("-f", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=0.3, help="timing per size and backend")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timings per size and backend; the median is kept")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs, each a job per backend of every size")
    parser.add_argument("--arbench", help="arbench to compare with (its in-place busbw)")
    parser.add_argument("--shared-tensors", action="store_true",
                        help="arcoll also on a tensor in shared memory (zero-copy buckets)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    if args.arbench and not args.rank_of:
        check_same_build(parser, args.arbench)
    runs, library = [], []
    for number in range(args.runs):
        rows = None
        for backend in torch_ranks.in_turn(args, number):
            job = torch_ranks.run(rank_main, args, backend)
            if job is None:
                return 0  # a rank under mpirun
            rows = [{**mine, **theirs} for mine, theirs in zip(rows or job, job)]
        runs.append(rows)
        # arbench in each run too: the machine's pace moves between runs.
        if args.arbench:
            library.append(arbench_busbw(args.arbench, args.np, args))
    factor = 2 * (args.np - 1) / args.np
    ours = [name for name in ("arcoll", "arcoll+shared") if name in runs[0][0]]
    peers = [name for name in ("gloo", "mpi") if name in runs[0][0]]
    pairs = [(a, b) for a in ours for b in peers]
    print(f"# torch.distributed.all_reduce, float32 sum, {args.np} ranks, in place, {args.runs} "
          f"run(s): per-call time in us, min / median / max over the runs, and busbw of the "
          f"median (GB/s, nccl-tests' definition); A/B: busbw ratio, median of the runs' and "
          f"(lowest)" + ("; torch/arbench: arcoll's busbw over arbench's in the same run, median "
                         "and (lowest)" if library else ""))
    print(f"# {'size':>10}" + "".join(f" {name + ' us':>26} {'busbw':>6}" for name in ours + peers)
          + "".join(f" {a + '/' + b:>21}" for a, b in pairs)
          + (f" {'torch/arbench':>15}" if library else ""))
    for i, row in enumerate(runs[0]):
        nbytes = row["bytes"]
        times = {name: [run[i][name] * 1e6 for run in runs] for name in ours + peers}
        line = f"  {nbytes:>10}"
        for name in ours + peers:
            median = statistics.median(times[name])
            line += f" {spread(times[name]):>26} {nbytes / (median * 1e-6) / 1e9 * factor:>6.2f}"
        for a, b in pairs:
            ratios = [tb / ta for ta, tb in zip(times[a], times[b])]
            line += f" {'x%.2f (x%.2f)' % (statistics.median(ratios), min(ratios)):>21}"
        if library and all(run.get(nbytes) for run in library):
            shares = [nbytes / (t * 1e-6) / 1e9 * factor / run[nbytes]
                      for t, run in zip(times["arcoll"], library)]
            line += f" {'%.0f%% (%.0f%%)' % (100 * statistics.median(shares), 100 * min(shares)):>15}"
        print(line)
    return 0

if __name__ == "__main__":
    sys.exit(main())
