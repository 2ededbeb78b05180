"""pip installs the backend as torch users install one: a virtual environment that sees the
system's torch (--system-site-packages), `pip install --no-build-isolation` of the clone into
it (from the build folder this suite runs on, ARCOLL_PIP_BUILD_DIR, so nothing is built twice),
then, from a folder outside the clone and with no PYTHONPATH, `import arcoll_torch` finds the
installed module and a DDP job trains on it (under torchrun where this torch's torchrun can
start, else spawned); `pip uninstall arcoll-torch` removes it.

Usage: PYTHONPATH=build/python python3 tests/torch/test_pip_install.py"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOB = '''
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
import arcoll_torch
from torch.nn.parallel import DistributedDataParallel as DDP

def train(rank, size):
    dist.init_process_group("arcoll", rank=rank, world_size=size)
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    template = torch.nn.Linear(64, 8)
    models = {}
    for name, group in (("arcoll", dist.group.WORLD), ("gloo", gloo)):
        net = torch.nn.Linear(64, 8)
        net.load_state_dict(template.state_dict())
        models[name] = DDP(net, process_group=group)
    optimizers = {n: torch.optim.SGD(m.parameters(), lr=0.1) for n, m in models.items()}
    generator = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(16, 64, generator=generator)
        for name, model in models.items():
            optimizers[name].zero_grad()
            model(x).square().sum().backward()
            optimizers[name].step()
    for a, b in zip(models["arcoll"].parameters(), models["gloo"].parameters()):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    if rank == 0:
        print("ddp on arcoll from", arcoll_torch.__file__, flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    torch.set_num_threads(1)
    if "LOCAL_RANK" in os.environ:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
        mp.spawn(train, args=(2,), nprocs=2)
'''


def main():
    module_dir = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]
    build_dir = os.path.dirname(os.path.abspath(module_dir)) if module_dir else ""
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        print("test_pip_install: PYTHONPATH does not name a build folder's python/ (see Usage)")
        return 1
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError:
        print("test_pip_install: skipped: this Python has no venv/ensurepip (python3-venv)")
        return 77
    import torch
    with tempfile.TemporaryDirectory() as work:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        # venv and pip load no arcoll: without a sanitizer's run-time preloaded (a sanitized
        # build's suite) they take a third of the time.
        tool_env = {k: v for k, v in env.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
        python = os.path.join(work, "venv", "bin", "python")

        def run(*args, extra_env=None, loads_arcoll=True):
            done = subprocess.run(list(args), cwd=work,
                                  env={**(env if loads_arcoll else tool_env), **(extra_env or {})},
                                  text=True, capture_output=True)
            assert done.returncode == 0, (f"{' '.join(args)} exited {done.returncode}:\n"
                                          f"{done.stdout}\n{done.stderr}")
            return done

        run(sys.executable, "-m", "venv", "--system-site-packages", os.path.join(work, "venv"),
            loads_arcoll=False)
        install = run(python, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                      "--no-deps", ROOT,
                      extra_env={"ARCOLL_PIP_BUILD_DIR": build_dir}, loads_arcoll=False)
        assert "Successfully installed arcoll-torch" in install.stdout, install.stdout
        where = run(python, "-c", "import arcoll_torch; print(arcoll_torch.__file__)").stdout.strip()
        assert where.startswith(os.path.join(work, "venv")), where
        # The module says which arcoll it holds: the package's version, and a commit.
        said = run(python, "-c", "import arcoll_torch, importlib.metadata as m; "
                   "print(arcoll_torch.__version__, m.version('arcoll-torch'), "
                   "arcoll_torch.git_commit)").stdout.split()
        assert len(said) == 3 and said[0] == said[1] and said[2], said
        script = os.path.join(work, "ddp_job.py")
        with open(script, "w") as f:
            f.write(JOB)
        if torch.__version__.startswith("1."):  # torch 2.x's torchrun needs libuv (README)
            # (torch 1.13's torchrun fails without --redirects: README)
            job = run(python, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                      "--redirects", "1", "--tee", "1", "--master_port", str(free_port()), script)
        else:
            job = run(python, script, str(free_port()))
        assert "ddp on arcoll from " + where in job.stdout, job.stdout + job.stderr
        run(python, "-m", "pip", "uninstall", "-y", "arcoll-torch", loads_arcoll=False)
        gone = subprocess.run([python, "-c", "import arcoll_torch"], cwd=work, env=env,
                              capture_output=True, text=True)
        assert gone.returncode != 0 and "No module named 'arcoll_torch'" in gone.stderr, gone.stderr
    print("pip install: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
