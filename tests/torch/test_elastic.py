"""Training that carries on without a lost rank: 4 ranks train a small model with DDP on arcoll;
rank 2 is SIGKILLed mid-training; the survivors' step raises, they arcoll_torch.shrink() the
default group, rebuild DDP on the new group and train on; the new group's all_reduce,
all_gather and ranks are right, and every survivor ends with the same weights.

Usage: PYTHONPATH=build/python python3 tests/torch/test_elastic.py"""
import datetime
import os
import signal
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402
import arcoll_torch  # noqa: E402

SIZE, VICTIM, KILL_AT, STEPS = 4, 2, 5, 12


def train_step(ddp, optimizer, rank):
    inputs = harness.rank_input(rank, (8, 16), torch.float32)
    optimizer.zero_grad()
    ddp(inputs).pow(2).mean().backward()
    optimizer.step()


def rank_main(rank, method, results):
    dist.init_process_group("arcoll", init_method=method, rank=rank, world_size=SIZE,
                            timeout=datetime.timedelta(seconds=30))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    group = None
    for step in range(STEPS):
        if rank == VICTIM and step == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            train_step(ddp, optimizer, rank)
        except RuntimeError:
            if group is not None:
                raise
            group = arcoll_torch.shrink()
            ddp = DDP(model, process_group=group)
            train_step(ddp, optimizer, group.rank())
    rank_in_group, size = dist.get_rank(group), dist.get_world_size(group)
    total = torch.tensor([rank_in_group + 1.0])
    dist.all_reduce(total, group=group)
    gathered = [torch.zeros(1) for _ in range(size)]
    dist.all_gather(gathered, torch.tensor([float(rank)]), group=group)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    first = weights.clone()
    dist.broadcast(first, 0, group=group)
    results.put((rank, rank_in_group, size, total.item(), [int(t.item()) for t in gathered],
                 bool(torch.equal(weights, first))))


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as workdir:
        method = harness.init_method("tcp", workdir)
        procs = [ctx.Process(target=rank_main, args=(r, method, results)) for r in range(SIZE)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
            if p.is_alive():
                p.kill()
                raise AssertionError("a rank hung")
    codes = [p.exitcode for p in procs]
    assert codes[VICTIM] == -signal.SIGKILL and all(
        c == 0 for r, c in enumerate(codes) if r != VICTIM), codes
    survivors = [r for r in range(SIZE) if r != VICTIM]
    out = {}
    while not results.empty():
        rank, new_rank, size, total, gathered, same = results.get()
        out[rank] = (new_rank, size, total, gathered, same)
    assert sorted(out) == survivors, out
    for new_rank, rank in enumerate(survivors):
        got_rank, size, total, gathered, same = out[rank]
        assert (got_rank, size) == (new_rank, SIZE - 1), out[rank]
        assert total == sum(range(1, SIZE)), out[rank]
        assert gathered == survivors, out[rank]
        assert same, f"rank {rank}'s weights differ from the new rank 0's"
    print(f"torch elastic: {len(survivors)} survivors of rank {VICTIM}'s death shrank, trained "
          "on with DDP and agree")
