"""What the torch backend's tests share: ranks started by torch.multiprocessing, each joining a
process group through the init method a test names, and inputs whose reductions are exact in
every dtype.

Ranks come from a fork server that imported torch and the backend once (the test's own module
too), not spawned: a spawned rank imports torch itself, 3 s of CPU under the sanitizers and
most of a test's time. Each rank is still a process of its own that joins its group from
nothing, and runs with the environment its test had when it started the rank (a fork server's
children would otherwise have the server's)."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import arcoll_torch  # noqa: F401  (registers the "arcoll" backend)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from free_port import free_port  # noqa: E402

CONTEXT = mp.get_context("forkserver")
CONTEXT.set_forkserver_preload(["__main__", "torch", "torch.distributed", "arcoll_torch",
                                "harness"])

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
FLOATING = {torch.float32, torch.float64, torch.float16, torch.bfloat16}


def init_method(kind, workdir):
    """An init_method URL of `kind` (env, tcp, file) for ranks of one host."""
    if kind == "env":
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
        return "env://"
    if kind == "tcp":
        return f"tcp://127.0.0.1:{free_port()}"
    return "file://" + os.path.join(workdir, "rendezvous")


def _take(environment):
    os.environ.clear()
    os.environ.update(environment)


def _in_environment(environment, target, *args):
    _take(environment)
    target(*args)


def process(target, args):
    """A rank's process, not yet started, that runs target(*args) in this environment."""
    return CONTEXT.Process(target=_in_environment, args=(dict(os.environ), target, *args))


def _entry(rank, environment, size, method, backend, body, args):
    _take(environment)
    dist.init_process_group(backend, init_method=method, rank=rank, world_size=size,
                            timeout=__import__("datetime").timedelta(seconds=60))
    try:
        body(rank, size, *args)
    finally:
        dist.destroy_process_group()


def run(body, size, *args, init="env", backend="arcoll"):
    """Runs body(rank, size, *args) on `size` ranks in one process group of arcoll (or as
    `backend` names it: "cpu:arcoll"); a failure in any rank fails the test with that rank's
    traceback."""
    with tempfile.TemporaryDirectory() as workdir:
        method = init_method(init, workdir)
        mp.start_processes(_entry, args=(dict(os.environ), size, method, backend, body, args),
                           nprocs=size, join=True, start_method="forkserver")


def rank_input(rank, shape, dtype, salt=0):
    """Rank `rank`'s input: small integers (1 or 2 for products), so that every reduction is
    exact in every dtype and the same in any order."""
    n = 1
    for d in shape:
        n *= d
    base = torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + salt
    values = base % 5 - 2 if dtype not in (torch.uint8,) else base % 5
    return values.reshape(shape).to(dtype)


def product_input(rank, shape, dtype, salt=0):
    n = 1
    for d in shape:
        n *= d
    base = torch.arange(n, dtype=torch.int64) + rank + salt
    return (base % 2 + 1).reshape(shape).to(dtype)
