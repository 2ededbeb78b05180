"""Data-parallel training of a small CNN on Fashion-MNIST with DistributedDataParallel, on
arcoll or on torch's Gloo: switching is one word (the backend given to init_process_group).

    PYTHONPATH=build/python python3 examples/torch/ddp_fashion_mnist.py --np 2 --backend arcoll
    PYTHONPATH=build/python python3 examples/torch/ddp_fashion_mnist.py --np 2 --backend gloo

Under torchrun (Debian's needs --redirects 1 --tee 1):

    PYTHONPATH=build/python torchrun --nproc_per_node 2 --redirects 1 --tee 1 \\
        examples/torch/ddp_fashion_mnist.py --backend arcoll

Each epoch prints the mean step time split into compute (the same step with DDP's
synchronisation switched off) and the communication DDP could not hide behind backward, then
the accuracy on the test set. The data is Debian's dataset-fashion-mnist."""
import argparse
import datetime
import gzip
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

try:
    import arcoll_torch  # noqa: F401  (registers the "arcoll" backend)
except ImportError:
    arcoll_torch = None

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """A gzipped IDX file (images: N x 28 x 28 bytes; labels: N bytes) as a numpy array."""
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = magic & 0xFF
        shape = struct.unpack(">" + "I" * dims, f.read(4 * dims))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(shape)


def load(data, split):
    images = read_idx(os.path.join(data, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.copy()).float().div_(255).sub_(0.286).div_(0.353).unsqueeze(1)
    return x, torch.from_numpy(labels.copy()).long()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def train(rank, size, args):
    torch.set_num_threads(args.threads)
    if "RANK" not in os.environ:  # started by --np: meet on this host
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group(args.backend, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(args.seed)
    train_x, train_y = load(args.data, "train")
    test_x, test_y = load(args.data, "t10k")
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = torch.utils.data.distributed.DistributedSampler(
        torch.utils.data.TensorDataset(train_x, train_y), num_replicas=size, rank=rank,
        seed=args.seed)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = list(sampler)
        steps = len(order) // args.batch if args.steps == 0 else args.steps
        synced, local = [], []
        for step in range(steps):
            index = order[step * args.batch:(step + 1) * args.batch]
            x, y = train_x[index], train_y[index]
            # Every fourth step runs without synchronisation first: its time is the compute.
            if step % 4 == 0:
                start = time.perf_counter()
                with model.no_sync():
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                local.append(time.perf_counter() - start)
                optimizer.zero_grad()
            start = time.perf_counter()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            synced.append(time.perf_counter() - start)
        model.eval()
        with torch.no_grad():
            correct = (model.module(test_x).argmax(1) == test_y).sum().item()
        model.train()
        step_ms = 1000 * sum(synced) / len(synced)
        compute_ms = 1000 * sum(local) / len(local)
        if rank == 0:
            print(f"epoch {epoch}: {args.backend} on {size} ranks, batch {args.batch}/rank: "
                  f"step {step_ms:.2f} ms (compute {compute_ms:.2f} ms, exposed communication "
                  f"{max(0.0, step_ms - compute_ms):.2f} ms), test accuracy "
                  f"{100 * correct / len(test_y):.2f}%", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="arcoll", choices=["arcoll", "gloo"])
    parser.add_argument("--np", type=int, default=2, help="ranks to start here (without torchrun)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=0, help="steps per epoch (0: the whole shard)")
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--port", type=int, default=29571)
    args = parser.parse_args()
    if args.backend == "arcoll" and arcoll_torch is None:
        parser.error("arcoll_torch is not importable: build arcoll (scripts/bench.sh) and set "
                     "PYTHONPATH=build/python")
    for name in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        if not os.path.exists(os.path.join(args.data, name)):
            parser.error(f"{os.path.join(args.data, name)} is missing "
                         "(install dataset-fashion-mnist, or give --data)")
    if "RANK" in os.environ:  # torchrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        mp.spawn(train, args=(args.np, args), nprocs=args.np)


if __name__ == "__main__":
    main()
