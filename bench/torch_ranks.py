"""Starts a torch benchmark's ranks on this host, one job per backend, and brings back what
rank 0 wrote: with torch.multiprocessing's spawn, or, where torch's MPI backend takes part,
every backend's under Open MPI's mpirun (MPI's ranks must be MPI's; the others start alike, as
mpirun binds each rank to a core: at 4 MiB the bound ranks took half the time on 2 cores).
mpirun starts the script again, with --rank-of, once per rank; the rank comes from
OMPI_COMM_WORLD_RANK.

Each job holds one process group only: a Gloo group kept alive beside arcoll's in the same
two processes slowed arcoll's calls by about 5% on 2 cores, the size of the differences
measured. Callers alternate the backends' jobs so that the machine's drift hits all alike."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import arcoll_torch  # noqa: F401 (registers the "arcoll" backend)


def add_arguments(parser):
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--mpi", action="store_true",
                        help="torch's MPI backend too (torch 2.x built with Open MPI): its ranks "
                             "start under Open MPI's mpirun")
    parser.add_argument("--rank-of", nargs=3, metavar=("BACKEND", "RENDEZVOUS", "OUT"),
                        help=argparse.SUPPRESS)


def backends(args):
    return ["arcoll", "gloo"] + (["mpi"] if args.mpi else [])


def in_turn(args, run):
    """The backends in the order of run number `run`: each goes first in turn."""
    names = backends(args)
    return names[run % len(names):] + names[:run % len(names)]


def init(rank, size, rendezvous, backend):
    """This job's one process group, the default one, on `backend`."""
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=300)
    if backend == "mpi":  # MPI's runtime gives the rank and size
        dist.init_process_group("mpi", timeout=timeout)
    else:
        dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank,
                                world_size=size, timeout=timeout)


def run(rank_main, args, backend):
    """Runs rank_main(rank, args, backend, rendezvous, out) on args.np ranks; returns what rank
    0 wrote to `out` as JSON. Under mpirun (args.rank_of) this process is one rank of the
    backend named there: runs it, None."""
    if args.rank_of:
        named, rendezvous, out = args.rank_of
        rank_main(int(os.environ["OMPI_COMM_WORLD_RANK"]), args, named, rendezvous, out)
        return None
    with tempfile.TemporaryDirectory() as work:
        rendezvous = os.path.join(work, "rendezvous")
        out = os.path.join(work, "out.json")
        if args.mpi:
            subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.np),
                            "--mca", "btl", "self,vader", sys.executable,
                            os.path.abspath(sys.argv[0]), *sys.argv[1:],
                            "--rank-of", backend, rendezvous, out], check=True)
        else:
            mp.spawn(rank_main, args=(args, backend, rendezvous, out), nprocs=args.np)
        with open(out) as f:
            return json.load(f)


def finish(rank, out, result, backend):
    """Rank 0 writes `result` to `out`; every rank then ends its job. Gloo's ranks leave at
    once: torch 1.13's Gloo can deadlock tearing down a DDP model's group at exit (its worker
    thread waits for the GIL that the thread joining it holds)."""
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.barrier()
    if backend == "gloo":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group()
