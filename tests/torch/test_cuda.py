"""The backend on CUDA tensors, where torch has CUDA and arcoll was built with the CUDA toolkit
(else skipped, saying which is missing): 2 and 3 ranks on the machine's GPUs (rank r on GPU r
modulo their count, so that processes share a GPU where there are fewer), every collective and
send/recv on f32, f16, bf16 and i32 tensors of 0, 1, 1031 and 2^18 + 3 elements, each checked
against a reference computed on the CPU, over shm (CUDA IPC) and over TCP (the last count past
1 MiB, where each message is copied through host memory); then one DDP step of a small model on the GPU,
whose weights must match the same step on the CPU over Gloo.

Usage: PYTHONPATH=build/python python3 tests/torch/test_cuda.py"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
from harness import rank_input, run  # noqa: E402

import arcoll_torch  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]
COUNTS = [0, 1, 1031, (1 << 18) + 3]
# torch 2.x routes CUDA tensors to the backend registered for the cuda device.
BACKEND = "arcoll" if torch.__version__.startswith("1.") else "cpu:arcoll,cuda:arcoll"


def sum_of(tensors, dtype):
    return torch.stack([t.to(torch.float64) for t in tensors]).sum(0).to(dtype)


def same(got, want, what):
    got = got.cpu()
    if want.is_floating_point():
        ok = torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, want)
    assert ok, f"{what}: got {got[:8]} want {want[:8]}"


def collectives(rank, size):
    gpu = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(gpu)
    for dtype in DTYPES:
        for count in COUNTS:
            what = f"{dtype} {count}"
            everyone = [rank_input(r, (count,), dtype, 1) for r in range(size)]
            t = everyone[rank].to(gpu)
            dist.all_reduce(t)
            same(t, sum_of(everyone, dtype), f"all_reduce {what}")
            t = everyone[rank].to(gpu)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            most = torch.stack([e.to(torch.float64) for e in everyone]).max(0).values
            same(t, most.to(dtype), f"all_reduce max {what}")
            root = count % size
            t = everyone[rank].to(gpu)
            dist.reduce(t, dst=root)
            if rank == root:
                same(t, sum_of(everyone, dtype), f"reduce {what}")
            t = everyone[rank].to(gpu) if rank == root else torch.zeros(count, dtype=dtype,
                                                                        device=gpu)
            dist.broadcast(t, src=root)
            same(t, everyone[root], f"broadcast {what}")
            out = [torch.zeros(count, dtype=dtype, device=gpu) for _ in range(size)]
            dist.all_gather(out, everyone[rank].to(gpu))
            for r in range(size):
                same(out[r], everyone[r], f"all_gather block {r} {what}")
            blocks = [[rank_input(r, (count,), dtype, 3 + b) for b in range(size)]
                      for r in range(size)]
            out = torch.zeros(count, dtype=dtype, device=gpu)
            dist.reduce_scatter(out, [b.to(gpu) for b in blocks[rank]])
            same(out, sum_of([blocks[r][rank] for r in range(size)], dtype),
                 f"reduce_scatter {what}")
            gathered = ([torch.zeros(count, dtype=dtype, device=gpu) for _ in range(size)]
                        if rank == root else None)
            dist.gather(everyone[rank].to(gpu), gathered, dst=root)
            if rank == root:
                for r in range(size):
                    same(gathered[r], everyone[r], f"gather block {r} {what}")
            out = torch.zeros(count, dtype=dtype, device=gpu)
            dist.scatter(out, [b.to(gpu) for b in blocks[root]] if rank == root else None,
                         src=root)
            same(out, blocks[root][rank], f"scatter {what}")
            out = torch.zeros(count * size, dtype=dtype, device=gpu)
            dist.all_to_all_single(out, torch.cat(blocks[rank]).to(gpu))
            same(out, torch.cat([blocks[r][rank] for r in range(size)]), f"all_to_all {what}")
            got = torch.zeros(count, dtype=dtype, device=gpu)
            requests = [dist.isend(everyone[rank].to(gpu), (rank + 1) % size),
                        dist.irecv(got, (rank - 1) % size)]
            for request in requests:
                request.wait()
            same(got, everyone[(rank - 1) % size], f"isend/irecv {what}")
    # A CPU tensor between CUDA ones keeps to host memory.
    t = rank_input(rank, (1031,), torch.float32)
    dist.all_reduce(t)
    same(t, sum_of([rank_input(r, (1031,), torch.float32) for r in range(size)], torch.float32),
         "all_reduce of a CPU tensor")


def model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def ddp_step(rank, size, device_kind, path):
    device = (torch.device("cuda", rank % torch.cuda.device_count()) if device_kind == "cuda"
              else torch.device("cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    net = torch.nn.parallel.DistributedDataParallel(
        model().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    torch.manual_seed(100 + rank)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    torch.nn.functional.cross_entropy(net(x.to(device)), y.to(device)).backward()
    optimizer.step()
    if rank == 0:
        torch.save([p.detach().cpu() for p in net.parameters()], path)


def main():
    if not torch.cuda.is_available():
        print("SKIP: this torch has no CUDA device (torch.cuda.is_available() is false)")
        sys.exit(77)
    if not arcoll_torch.takes_cuda:
        print("SKIP: this arcoll was built without the CUDA toolkit")
        sys.exit(77)
    for size in (2, 3):
        run(collectives, size, backend=BACKEND)
    # Over TCP, where no peer reads the GPU's memory: from 1 MiB each message is copied.
    os.environ["ARCOLL_TRANSPORT"] = "tcp"
    try:
        run(collectives, 2, backend=BACKEND)
    finally:
        del os.environ["ARCOLL_TRANSPORT"]
    workdir = os.environ.get("TMPDIR", "/tmp")
    on_gpu = os.path.join(workdir, f"arcoll-cuda-ddp-{os.getpid()}-gpu.pt")
    on_cpu = os.path.join(workdir, f"arcoll-cuda-ddp-{os.getpid()}-cpu.pt")
    try:
        run(ddp_step, 2, "cuda", on_gpu, backend=BACKEND)
        run(ddp_step, 2, "cpu", on_cpu, backend="gloo")
        for got, want in zip(torch.load(on_gpu), torch.load(on_cpu)):
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), "DDP on the GPU differs"
    finally:
        for path in (on_gpu, on_cpu):
            if os.path.exists(path):
                os.remove(path)
    print("torch on CUDA tensors: ok")


if __name__ == "__main__":
    main()
