"""Every collective through torch.distributed on the "arcoll" backend, checked against a
reference computed in each rank from every rank's input: every dtype the backend carries, counts
0, 1, 7 and 1031, uneven all-to-all splits, every root; 2 and 3 ranks, through the env://,
tcp:// and file:// init methods. Bad tensors (non-contiguous, not on the CPU, an unsupported
dtype) raise RuntimeError at once and the group stays usable. A call's future completes with its
tensors, or raises its error.

Usage: PYTHONPATH=build/python python3 tests/torch/test_collectives.py"""
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, __import__("os").path.dirname(__file__))
from harness import DTYPES, FLOATING, product_input, rank_input, run  # noqa: E402

COUNTS = [0, 1, 7, 1031]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def reference(op, inputs, dtype):
    stacked = torch.stack([i.to(torch.float64) for i in inputs])
    if op == "sum":
        out = stacked.sum(0)
    elif op == "product":
        out = stacked.prod(0)
    elif op == "min":
        out = stacked.min(0).values
    elif op == "max":
        out = stacked.max(0).values
    else:
        out = stacked.mean(0)
    return out.to(dtype)


def same(got, want, what):
    if want.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        ok = torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, want)
    assert ok, f"{what}: got {got[:8]} want {want[:8]}"


def inputs_of(op, size, count, dtype, salt):
    make = product_input if op == "product" else rank_input
    return [make(r, (count,), dtype, salt) for r in range(size)]


def collectives(rank, size):
    for dtype in DTYPES:
        for count in COUNTS:
            for name, op in OPS.items():
                if name == "avg" and dtype not in FLOATING:
                    continue
                everyone = inputs_of(name, size, count, dtype, 1)
                t = everyone[rank].clone()
                dist.all_reduce(t, op=op)
                same(t, reference(name, everyone, dtype), f"all_reduce {name} {dtype} {count}")
                root = (count + len(name)) % size
                t = everyone[rank].clone()
                dist.reduce(t, dst=root, op=op)
                if rank == root:
                    same(t, reference(name, everyone, dtype), f"reduce {name} {dtype} {count}")
            everyone = inputs_of("sum", size, count, dtype, 2)
            for root in range(size):
                t = everyone[rank].clone() if rank == root else torch.zeros(count, dtype=dtype)
                dist.broadcast(t, src=root)
                same(t, everyone[root], f"broadcast from {root} {dtype} {count}")
            # all_gather into a list and into one tensor
            out = [torch.zeros(count, dtype=dtype) for _ in range(size)]
            dist.all_gather(out, everyone[rank])
            for r in range(size):
                same(out[r], everyone[r], f"all_gather block {r} {dtype} {count}")
            flat = torch.zeros(count * size, dtype=dtype)
            dist._all_gather_base(flat, everyone[rank])
            same(flat, torch.cat(everyone), f"_all_gather_base {dtype} {count}")
            # reduce_scatter from a list and from one tensor
            blocks = [[rank_input(r, (count,), dtype, 3 + b) for b in range(size)] for r in range(size)]
            out = torch.zeros(count, dtype=dtype)
            dist.reduce_scatter(out, blocks[rank])
            same(out, reference("sum", [blocks[r][rank] for r in range(size)], dtype),
                 f"reduce_scatter {dtype} {count}")
            out = torch.zeros(count, dtype=dtype)
            dist._reduce_scatter_base(out, torch.cat(blocks[rank]))
            same(out, reference("sum", [blocks[r][rank] for r in range(size)], dtype),
                 f"_reduce_scatter_base {dtype} {count}")
            # gather and scatter to and from every root
            for root in range(size):
                gathered = [torch.zeros(count, dtype=dtype) for _ in range(size)] if rank == root else None
                dist.gather(everyone[rank], gathered, dst=root)
                if rank == root:
                    for r in range(size):
                        same(gathered[r], everyone[r], f"gather to {root} block {r} {dtype}")
                out = torch.zeros(count, dtype=dtype)
                dist.scatter(out, blocks[root] if rank == root else None, src=root)
                same(out, blocks[root][rank], f"scatter from {root} {dtype} {count}")
            # all_to_all of equal blocks, and all_to_all_single with uneven splits (rank a sends
            # (a + 2b) % 3 rows of 5 elements to rank b; some empty)
            send = [rank_input(rank * size + b, (count,), dtype) for b in range(size)]
            out = [torch.zeros(count, dtype=dtype) for _ in range(size)]
            dist.all_to_all(out, send)
            for r in range(size):
                same(out[r], rank_input(r * size + rank, (count,), dtype), f"all_to_all from {r}")
            rows = lambda a, b: (a + 2 * b + count) % 3  # noqa: E731
            send_split = [rows(rank, b) for b in range(size)]
            recv_split = [rows(a, rank) for a in range(size)]
            source = torch.cat([rank_input(rank * size + b, (send_split[b], 5), dtype)
                                for b in range(size)])
            out = torch.zeros(sum(recv_split), 5, dtype=dtype)
            dist.all_to_all_single(out, source, recv_split, send_split)
            want = torch.cat([rank_input(a * size + rank, (recv_split[a], 5), dtype)
                              for a in range(size)])
            same(out, want, f"all_to_all_single uneven {dtype}")
            # several tensors reduced in one call
            parts = [inputs_of("sum", size, n, dtype, 4 + n) for n in (count, 3, 0)]
            mine = [p[rank].clone() for p in parts]
            dist.all_reduce_coalesced(mine)
            for got, p in zip(mine, parts):
                same(got, reference("sum", p, dtype), f"all_reduce_coalesced {dtype}")
    # point to point around the ring, then a barrier
    t = rank_input(rank, (999,), torch.float32)
    got = torch.zeros(999)
    if rank % 2 == 0:
        dist.send(t, (rank + 1) % size)
        dist.recv(got, (rank - 1) % size)
    else:
        dist.recv(got, (rank - 1) % size)
        dist.send(t, (rank + 1) % size)
    same(got, rank_input((rank - 1) % size, (999,), torch.float32), "send/recv")
    dist.barrier()


def futures(rank, size):
    """A call's future, asked for before its call has ended or after, completes with the call's
    tensors (then() chains on it); a failed call's future raises the call's error."""
    everyone = [rank_input(r, (1031,), torch.float32) for r in range(size)]
    want = reference("sum", everyone, torch.float32)
    t = everyone[rank].clone()
    work = dist.all_reduce(t, async_op=True)
    early = work.get_future()
    doubled = early.then(lambda f: f.value()[0] * 2)
    same(early.wait()[0], want, "future asked for before its call ended")
    same(doubled.wait(), want * 2, "then() on it")
    work.wait()
    late = work.get_future()
    assert late.done()
    same(late.wait()[0], want, "future asked for after its call ended")
    work = dist.broadcast(torch.ones(8), src=rank, async_op=True)  # every rank names itself
    try:
        work.get_future().wait()
    except RuntimeError as e:
        assert "root" in str(e), str(e)
    else:
        raise AssertionError("a broadcast whose roots disagree completed its future")


def bad_tensors(rank, size):
    t = torch.ones(4, 4)
    # (A tensor on another device is refused too, but this machine has none to make one on.)
    for bad, says in [(t.t(), "non-contiguous"), (torch.ones(4, dtype=torch.bool), "dtype")]:
        try:
            dist.all_reduce(bad)
        except RuntimeError as e:
            assert says in str(e), str(e)
        else:
            raise AssertionError(f"all_reduce took a bad tensor ({says})")
    t = torch.ones(8)
    dist.all_reduce(t)  # nothing was sent by the rejected calls
    assert torch.all(t == size), t


if __name__ == "__main__":
    run(collectives, 2)
    run(collectives, 3, init="tcp")
    run(bad_tensors, 2, init="file")
    run(futures, 2)
    print("torch collectives: ok")
