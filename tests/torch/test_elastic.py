"""Training that carries on without a lost rank: 4 ranks train a small model with DDP on arcoll;
rank 2 is SIGKILLed mid-training; the survivors' step raises, they arcoll_torch.shrink() the
default group, rebuild DDP on the new group and train on; then a replacement started by hand
joins them (arcoll_torch.grow on the survivors, arcoll_torch.join on it) and takes their
weights. Each group's all_reduce, all_gather and ranks are right, and every rank ends with the
same weights.

Usage: PYTHONPATH=build/python python3 tests/torch/test_elastic.py"""
import datetime
import os
import signal
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402
import arcoll_torch  # noqa: E402

SIZE, VICTIM, KILL_AT, STEPS = 4, 2, 5, 12
REPLACEMENT = 10  # the replacement's name in the results


def train_step(ddp, optimizer, rank):
    inputs = harness.rank_input(rank, (8, 16), torch.float32)
    optimizer.zero_grad()
    ddp(inputs).pow(2).mean().backward()
    optimizer.step()


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def check_group(group, rank, results, model):
    """The group's ranks, a sum and a gather over it, and whether this rank's weights are its
    rank 0's."""
    total = torch.tensor([group.rank() + 1.0])
    dist.all_reduce(total, group=group)
    gathered = [torch.zeros(1) for _ in range(group.size())]
    dist.all_gather(gathered, torch.tensor([float(rank)]), group=group)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    first = weights.clone()
    dist.broadcast(first, 0, group=group)
    results.put((rank, group.rank(), group.size(), total.item(), [int(t.item()) for t in gathered],
                 bool(torch.equal(weights, first))))


def replacement_main(store_path, results):
    group = arcoll_torch.join(dist.FileStore(store_path, -1))
    model = make_model()
    for p in model.parameters():  # the survivors' weights
        dist.broadcast(p.data, 0, group=group)
    check_group(group, REPLACEMENT, results, model)


def rank_main(rank, method, store_path, results):
    dist.init_process_group("arcoll", init_method=method, rank=rank, world_size=SIZE,
                            timeout=datetime.timedelta(seconds=30))
    model = make_model()
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
    assert (dist.get_rank(group), dist.get_world_size(group)) == (group.rank(), group.size())
    check_group(group, rank, results, model)
    grown = arcoll_torch.grow(dist.FileStore(store_path, -1), 1, group)
    for p in model.parameters():
        dist.broadcast(p.data, 0, group=grown)
    check_group(grown, rank, results, model)


if __name__ == "__main__":
    results = harness.CONTEXT.Queue()
    with tempfile.TemporaryDirectory() as workdir:
        method = harness.init_method("tcp", workdir)
        store_path = os.path.join(workdir, "grow-store")
        procs = [harness.process(rank_main, (r, method, store_path, results))
                 for r in range(SIZE)]
        procs.append(harness.process(replacement_main, (store_path, results)))
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
    shrunk, grown = {}, {}
    while not results.empty():
        rank, new_rank, size, total, gathered, same = results.get()
        (shrunk if size == SIZE - 1 else grown)[rank] = (new_rank, size, total, gathered, same)
    assert sorted(shrunk) == survivors, shrunk
    for new_rank, rank in enumerate(survivors):
        assert shrunk[rank] == (new_rank, SIZE - 1, sum(range(1, SIZE)), survivors, True), \
            shrunk[rank]
    members = survivors + [REPLACEMENT]
    assert sorted(grown) == members, grown
    for new_rank, rank in enumerate(members):
        assert grown[rank] == (new_rank, SIZE, sum(range(1, SIZE + 1)), members, True), \
            grown[rank]
    print(f"torch elastic: {len(survivors)} survivors of rank {VICTIM}'s death shrank, trained "
          "on with DDP and agree; a replacement joined them")
