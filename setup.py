"""Builds the arcoll_torch module with the project's CMake build for `pip install`.

`pip install --no-build-isolation .` (run from the clone) configures a Release build in
build-pip/ (or ARCOLL_PIP_BUILD_DIR, an existing build folder reused as it is: the test suite
installs from its own) for this interpreter and the torch it imports, builds the module only
(it holds its own copy of the library) and installs it; `pip uninstall arcoll-torch` removes
it. Build isolation would hide the environment's torch, which the module must be built against.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(arcoll\s+VERSION\s+([0-9.]+)", f.read()).group(1)


def torch_cmake_prefix():
    """Where the imported torch keeps its CMake package, when it has one (pip's torch does;
    Debian's is found by CMake on its own)."""
    try:
        import torch.utils
    except ImportError:
        sys.exit("arcoll-torch: this Python cannot import torch; install torch first, then "
                 "pip install --no-build-isolation .")
    prefix = torch.utils.cmake_prefix_path
    return prefix if os.path.isdir(prefix) else None


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("ARCOLL_PIP_BUILD_DIR", os.path.join(ROOT, "build-pip"))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            configure = ["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
                         "-DCMAKE_BUILD_TYPE=Release", "-DARCOLL_BUILD_BENCH=OFF",
                         "-DARCOLL_BUILD_TESTS=OFF",
                         f"-DARCOLL_PYTHON={sys.executable}"]
            prefix = torch_cmake_prefix()
            if prefix:
                configure.append(f"-DCMAKE_PREFIX_PATH={prefix}")
            subprocess.run(configure, check=True)
        jobs = os.environ.get("ARCOLL_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", build_dir, "--target", "arcoll_torch",
                        "--parallel", jobs], check=True)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(build_dir, "python", "arcoll_torch" + suffix)
        if not os.path.exists(built):
            found = glob.glob(os.path.join(build_dir, "python", "arcoll_torch*.so"))
            sys.exit(f"arcoll-torch: {build_dir} holds {found or 'no module'}, not one for this "
                     f"Python ({suffix}): was it configured with libtorch and pybind11 found "
                     "for this interpreter (its configure log's libtorch line)?")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


# setuptools' own build folder would be build/, the CMake build of the README's commands.
setup(version=version(), packages=[], py_modules=[],
      ext_modules=[Extension("arcoll_torch", sources=[])],
      cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join(ROOT, "build-pip", "setuptools")}})
