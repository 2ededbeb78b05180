"""What training code builds on a backend, on arcoll against torch's Gloo in the same ranks:
isend/irecv complete under MPI's progress rule; ZeroRedundancyOptimizer and (torch 2.x) FSDP
with shards of uneven size train to Gloo's weights; object collectives, batch_isend_irecv and
subgroups give what Gloo gives; on torch 2.x also with the group made as
init_process_group("cpu:arcoll"). 3 ranks, so that nothing divides evenly.

Usage: PYTHONPATH=build/python python3 tests/torch/test_frameworks.py"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(__file__))
from harness import run  # noqa: E402

TORCH_2 = int(torch.__version__.split(".")[0]) >= 2
STEPS = 4


def net():
    # 7*13+13 + 13*5+5 = 174 parameters: no even split over 3 ranks.
    return torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.Tanh(), torch.nn.Linear(13, 5))


def train(make, rank):
    """The parameters after STEPS steps of the model `make` wraps, on this rank's batches."""
    torch.manual_seed(0)
    model, optimizer = make(net())
    generator = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x = torch.randn(6, 7, generator=generator)
        y = torch.randn(6, 5, generator=generator)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model


def same_parameters(a, b, what):
    for (name, x), y in zip(a, b):
        assert torch.allclose(x, y, rtol=1e-5, atol=1e-6), (
            f"{what}, {name}: arcoll and gloo differ by {(x - y).abs().max().item()}")


def zero(rank, groups):
    def make(group):
        def wrap(module):
            model = DDP(module, process_group=group)
            return model, ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD,
                                                  process_group=group, lr=0.1, momentum=0.9)
        return wrap
    models = {name: train(make(group), rank) for name, group in groups.items()}
    same_parameters(models["arcoll"].module.named_parameters(),
                    models["gloo"].module.parameters(), "ZeroRedundancyOptimizer")


def fsdp(rank, groups):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def make(group):
        def wrap(module):
            model = FSDP(module, process_group=group, device_id=torch.device("cpu"),
                         use_orig_params=True)
            return model, torch.optim.Adam(model.parameters(), lr=0.01)
        return wrap
    models = {name: train(make(group), rank) for name, group in groups.items()}
    full = {}
    for name, model in models.items():
        with FSDP.summon_full_params(model):
            full[name] = [(n, p.detach().clone()) for n, p in model.named_parameters()]
    same_parameters(full["arcoll"], [p for _, p in full["gloo"]], "FSDP")


def objects_p2p_subgroups(rank, size, groups):
    for name, group in groups.items():
        gathered = [None] * size
        dist.all_gather_object(gathered, {"rank": rank, "text": "x" * rank}, group=group)
        assert gathered == [{"rank": r, "text": "x" * r} for r in range(size)], (name, gathered)
        sent = [{"from": 0, "values": [1.5, None, "a"]}, 17] if rank == 0 else [None, None]
        dist.broadcast_object_list(sent, src=0, group=group)
        assert sent == [{"from": 0, "values": [1.5, None, "a"]}, 17], (name, sent)
        into = [None] * size if rank == 1 else None
        dist.gather_object(rank * 10, into, dst=1, group=group)
        if rank == 1:
            assert into == [r * 10 for r in range(size)], (name, into)
        # A ring of batched sends and receives, two sizes.
        outgoing = [torch.full((n,), float(rank)) for n in (1, 1000)]
        incoming = [torch.empty(n) for n in (1, 1000)]
        ops = []
        for out, inc in zip(outgoing, incoming):
            ops.append(dist.P2POp(dist.isend, out, (rank + 1) % size, group=group))
            ops.append(dist.P2POp(dist.irecv, inc, (rank - 1) % size, group=group))
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        for inc in incoming:
            assert torch.all(inc == float((rank - 1) % size)), (name, "batch_isend_irecv", inc)
    # A subgroup of the first and last rank on arcoll, one of the others on Gloo.
    pair = dist.new_group([0, size - 1])
    if rank in (0, size - 1):
        t = torch.arange(11, dtype=torch.float64) + rank
        dist.all_reduce(t, group=pair)
        want = torch.arange(11, dtype=torch.float64) * 2 + (size - 1)
        assert torch.equal(t, want), ("subgroup", t)
        b = torch.full((3,), float(rank))
        dist.broadcast(b, src=size - 1, group=pair)
        assert torch.all(b == size - 1), ("subgroup broadcast", b)


def progress_rule(rank, size):
    """isend then recv, and irecv then send, on a ring at 8 B and 8 MiB: each completes as the
    rank's next call moves the messages (MPI's progress rule), as Gloo's and MPI's do."""
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    for n in (2, 2 << 20):
        out, got = torch.full((n,), float(rank)), torch.empty(n)
        request = dist.isend(out, nxt)
        dist.recv(got, prev)
        request.wait()
        assert torch.all(got == prev), ("isend then recv", n)
        request = dist.irecv(got, prev)
        dist.send(out * 2, nxt)
        request.wait()
        assert torch.all(got == 2 * prev), ("irecv then send", n)


def everything(rank, size):
    groups = {"arcoll": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    progress_rule(rank, size)
    objects_p2p_subgroups(rank, size, groups)
    zero(rank, groups)
    if TORCH_2:
        fsdp(rank, groups)
    if rank == 0:
        print(f"{dist.get_backend()}: progress rule; objects, batch_isend_irecv, subgroups, ZeRO"
              + (", FSDP" if TORCH_2 else "") + " match gloo", flush=True)


if __name__ == "__main__":
    run(everything, 3)
    if TORCH_2:
        run(everything, 3, backend="cpu:arcoll")
    else:
        print("torch 1.13: no FSDP on CPU, no device-qualified backends; those run on torch 2.x")
    print("frameworks on arcoll: ok")
