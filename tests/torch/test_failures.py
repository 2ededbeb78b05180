"""Failures through torch.distributed on arcoll: a rank killed mid-training makes every other
rank raise RuntimeError naming it within the group's timeout (no hang); ranks whose calls
differ (tensors of other shapes) raise naming both calls; a Work waited for past its timeout
raises, and the group is aborted on every rank.

Usage: PYTHONPATH=build/python python3 tests/torch/test_failures.py"""
import datetime
import os
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

TIMEOUT_S = 10


def rank_main(rank, size, method, scenario, results):
    dist.init_process_group("arcoll", init_method=method, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    start = time.monotonic()
    try:
        if scenario == "killed":
            t = torch.ones(1 << 20)
            for step in range(100000):
                if rank == 1 and step == 20:
                    os.kill(os.getpid(), signal.SIGKILL)
                dist.all_reduce(t)
                t.fill_(1.0)
        elif scenario == "mismatch":
            dist.all_reduce(torch.ones(1000 if rank == 0 else 999))
            dist.barrier()
        elif scenario == "late":
            if rank == 1:
                time.sleep(3)
            work = dist.all_reduce(torch.ones(8), async_op=True)
            if rank == 0:
                work.wait(timeout=datetime.timedelta(milliseconds=500))
            dist.barrier()
        results.put((rank, "no error", time.monotonic() - start))
    except RuntimeError as e:
        results.put((rank, str(e), time.monotonic() - start))


def run(scenario, size):
    results = harness.CONTEXT.Queue()
    with tempfile.TemporaryDirectory() as workdir:
        method = harness.init_method("tcp", workdir)
        procs = [harness.process(rank_main, (r, size, method, scenario, results))
                 for r in range(size)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=TIMEOUT_S * 4)
            if p.is_alive():
                p.kill()
                raise AssertionError(f"{scenario}: a rank hung")
    out = {}
    while not results.empty():
        rank, message, seconds = results.get()
        out[rank] = (message, seconds)
    return out, [p.exitcode for p in procs]


if __name__ == "__main__":
    out, codes = run("killed", 3)
    assert codes[1] == -signal.SIGKILL, codes
    for rank in (0, 2):
        message, seconds = out[rank]
        assert "rank 1" in message and seconds < TIMEOUT_S + 5, (rank, message, seconds)
    print(f"killed rank: the others raised naming it, "
          f"{max(out[r][1] for r in (0, 2)):.2f} s after the job started")

    out, codes = run("mismatch", 2)
    for rank in (0, 1):
        message, _ = out[rank]
        assert "1000" in message and "999" in message, (rank, message)
    print("mismatched calls: both ranks raised naming both calls")

    out, codes = run("late", 2)
    assert "did not complete within 500 ms" in out[0][0], out[0]
    assert "aborted" in out[1][0], out[1]
    print("a Work waited for past its timeout: raised, and the group aborted on both ranks")
    print("torch failures: ok")
