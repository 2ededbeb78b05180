"""DistributedDataParallel on arcoll against DDP on torch's Gloo, in the same ranks: the same
model, seed and data, trained step by step by a DDP over each group; the parameters must agree
within float rounding after every step, on 2 and 3 ranks, with find_unused_parameters=True, with
the fp16 compression hook, with no_sync() (gradients accumulated over micro-batches), and with
zero-copy buckets (arcoll_torch.share_cpu_tensors: gradients and buckets in shared memory).

Usage: PYTHONPATH=build/python python3 tests/torch/test_ddp.py"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import arcoll_torch

sys.path.insert(0, os.path.dirname(__file__))
from harness import run  # noqa: E402

STEPS = 5


class Net(torch.nn.Module):
    """A small CNN for 28x28 images; with `unused`, parameters no step uses."""

    def __init__(self, unused=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 5)
        self.fc = torch.nn.Linear(8 * 12 * 12, 10)
        if unused:
            self.unused = torch.nn.Linear(10, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(x.flatten(1))


def train_side_by_side(rank, size, variant, gloo):
    torch.manual_seed(0)
    arcoll = dist.group.WORLD
    find_unused = variant == "unused"
    # The same initial weights on both (DDP broadcasts rank 0's anyway).
    template = Net(find_unused)
    models = {}
    optimizers = {}
    for name, group in (("arcoll", arcoll), ("gloo", gloo)):
        net = Net(find_unused)
        net.load_state_dict(template.state_dict())
        models[name] = DDP(net, process_group=group, find_unused_parameters=find_unused)
        if variant == "fp16":
            models[name].register_comm_hook(group, default_hooks.fp16_compress_hook)
        optimizers[name] = torch.optim.SGD(models[name].parameters(), lr=0.1, momentum=0.9)
    tolerance = 2e-3 if variant == "fp16" else 1e-5
    generator = torch.Generator().manual_seed(1234 + rank)
    for step in range(STEPS):
        batches = [(torch.randn(4, 1, 28, 28, generator=generator),
                    torch.randint(0, 10, (4,), generator=generator))
                   for _ in range(2 if variant == "no_sync" else 1)]
        for name, model in models.items():
            optimizers[name].zero_grad()
            if variant == "no_sync":
                with model.no_sync():  # the first micro-batch's gradients stay local
                    x, y = batches[0]
                    torch.nn.functional.cross_entropy(model(x), y).backward()
            x, y = batches[-1]
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizers[name].step()
        for (pname, a), b in zip(models["arcoll"].module.named_parameters(),
                                 models["gloo"].module.parameters()):
            assert torch.allclose(a, b, rtol=tolerance, atol=tolerance), (
                f"{variant}, step {step}, {pname}: arcoll and gloo differ by "
                f"{(a - b).abs().max().item()}")
    if variant == "shared":
        grads = {n: p.grad for n, p in models["arcoll"].module.named_parameters()}
        assert arcoll_torch.is_shared(grads["fc.weight"]), "a 45 KiB gradient is not shared"
        assert not arcoll_torch.is_shared(grads["conv.bias"]), "a 32 B gradient is shared"
    # Every rank holds the same parameters.
    flat = torch.cat([p.detach().flatten() for p in models["arcoll"].parameters()])
    highest, lowest = flat.clone(), flat.clone()
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    assert torch.equal(highest, lowest), f"{variant}: ranks hold different parameters"


def every_variant(rank, size):
    # One job per world size: its ranks start torch once, not once per variant.
    gloo = dist.new_group(backend="gloo")
    for variant in ("plain", "unused", "fp16", "no_sync", "shared"):
        arcoll_torch.share_cpu_tensors(4096 if variant == "shared" else 0)
        train_side_by_side(rank, size, variant, gloo)
        if rank == 0:
            print(f"ddp {variant} on {size} ranks: arcoll matches gloo", flush=True)
    arcoll_torch.share_cpu_tensors(0)
    assert arcoll_torch.shared_cpu_tensor_bytes() == 0
    assert not arcoll_torch.is_shared(torch.empty(1 << 20))


if __name__ == "__main__":
    torch.set_num_threads(1)
    for bad in ("lots", -1):
        try:
            arcoll_torch.share_cpu_tensors(bad)
            raise AssertionError(f"share_cpu_tensors({bad!r}) was taken")
        except ValueError as e:
            assert "share_cpu_tensors" in str(e), e
    for size in (2, 3):
        run(every_variant, size)
    print("torch ddp: ok")
