"""Starts a torch benchmark's ranks on this host and brings back what rank 0 wrote: with
torch.multiprocessing's spawn, or under Open MPI's mpirun when torch's MPI backend takes part
(its ranks must then be MPI's: mpirun starts the script again, with --rank-of, once per rank;
the rank comes from OMPI_COMM_WORLD_RANK)."""
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
                        help="torch's MPI backend too (torch 2.x built with Open MPI): the ranks "
                             "start under Open MPI's mpirun")
    parser.add_argument("--rank-of", nargs=2, metavar=("RENDEZVOUS", "OUT"),
                        help=argparse.SUPPRESS)


def groups(rank, size, rendezvous, mpi):
    """The default group on arcoll, one on Gloo and (mpi) one on MPI, over the same ranks."""
    torch.set_num_threads(1)
    dist.init_process_group("arcoll", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=300))
    made = {"arcoll": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    if mpi:
        made["mpi"] = dist.new_group(backend="mpi")
    return made


def run(rank_main, args):
    """Runs rank_main(rank, args, rendezvous, out) on args.np ranks; returns what rank 0 wrote
    to `out` as JSON. Under mpirun (args.rank_of) this process is one rank: runs it, None."""
    if args.rank_of:
        rank_main(int(os.environ["OMPI_COMM_WORLD_RANK"]), args, *args.rank_of)
        return None
    with tempfile.TemporaryDirectory() as work:
        rendezvous = os.path.join(work, "rendezvous")
        out = os.path.join(work, "out.json")
        if args.mpi:
            subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.np),
                            "--mca", "btl", "self,vader", sys.executable,
                            os.path.abspath(sys.argv[0]), *sys.argv[1:],
                            "--rank-of", rendezvous, out], check=True)
        else:
            mp.spawn(rank_main, args=(args, rendezvous, out), nprocs=args.np)
        with open(out) as f:
            return json.load(f)


def write(rank, out, result):
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
