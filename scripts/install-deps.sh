#!/usr/bin/env bash
# Installs every build and test dependency of arcoll from Debian packages.
# Idempotent: prints nothing and touches nothing when all of them are already installed.
# --torch: the required ones and what the torch backend needs only (the Debian 13 root of
# scripts/debian13.sh, which builds and tests nothing else).
set -euo pipefail

required=(
  g++ cmake ninja-build pkg-config git python3 procps
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libssl-dev
  openmpi-bin libopenmpi-dev
)
# Detected at configure time; arcoll builds without them. Chromium renders arbench's HTML
# report in its test, rsvg-convert turns plots into PNG, PIL reads the screenshot.
# PyTorch, its C++ headers and pybind11 build the torch.distributed backend (frameworks/torch);
# Fashion-MNIST feeds the DDP example and arbench train (zlib reads its files); OpenMP OpenBLAS
# is the BLAS torch runs on; venv, pip, setuptools and wheel install the module with pip.
# debootstrap makes the Debian 13 root where the torch suite runs on torch 2.x. ccache keeps
# compiles for the next build of the same source, in any clone.
optional=(
  hwloc libhwloc-dev
  libucx-dev
  libibverbs-dev librdmacm-dev
  libgloo-dev
  clang libclang-rt-dev
  chromium librsvg2-bin python3-pil
  python3-torch libtorch-dev pybind11-dev python3-dev libopenblas0-openmp dataset-fashion-mnist
  zlib1g-dev python3-venv python3-pip python3-setuptools python3-wheel
  debootstrap ccache
)
if [ "${1:-}" = "--torch" ]; then
  optional=(python3-torch libtorch-dev pybind11-dev python3-dev libopenblas0-openmp iproute2
            python3-venv python3-pip python3-setuptools python3-wheel ccache)
elif [ $# -gt 0 ]; then
  echo "usage: $0 [--torch]" >&2
  exit 2
fi

missing=()
for package in "${required[@]}" "${optional[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
