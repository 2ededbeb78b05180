#!/usr/bin/env bash
# The GPU checks, on a machine with a GPU: builds arcoll with CUDA (in build-gpu/, or
# ARCOLL_BUILD_DIR; skipped where its arbench exists already), then
#   1. the kernels against the device's copy bandwidth (bench/cuda_kernel_bench),
#   2. correctness on GPU buffers: arbench --device cuda on 1 to 4 processes sharing the GPU,
#      every collective, type and operator at small sizes, every all-reduce algorithm, and
#      f32 sums of every collective from 16 B to 256 MiB, each row checked against the reference,
#   3. the same over TCP between 2 processes (no CUDA IPC): messages of calls from 1 MiB copied
#      through host memory one by one, and every call copied whole (ARCOLL_DEVICE_PIPELINE_BYTES),
#   4. speed: 1 to 4 processes sharing the GPU (CUDA IPC), beside NCCL's one-rank all-reduce (the
#      floor of a call's latency) and, with two GPUs or more, NCCL on as many ranks; TCP by
#      message and whole; host buffers for reference; every collective in whole-call chunks,
#   5. the torch backend on CUDA tensors (tests/torch/test_cuda.py), where this machine's torch
#      has CUDA (skipped, saying so, otherwise);
# and writes every table to one folder (gpu-check/, or the first argument). Exits 1 when a
# check fails, 77 when this machine has no GPU.
#
# Usage: scripts/gpu-check.sh [OUTPUT_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/gpu-check}" && cd "${1:-$root/gpu-check}" && pwd)
build=${ARCOLL_BUILD_DIR:-$root/build-gpu}
if ! nvidia-smi -L >"$out/gpus.txt" 2>&1; then
  cat "$out/gpus.txt"
  echo "SKIPPED: no GPU here (nvidia-smi -L failed)"
  exit 77
fi
gpus=$(grep -c '^GPU ' "$out/gpus.txt")
if [[ ! -x $build/bench/arbench ]]; then
  ARCOLL_BUILD_DIR=$build ARCOLL_BUILD_TARGETS="arbench cuda_kernel_bench" \
    "$root/scripts/build.sh" -DARCOLL_BUILD_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="${ARCOLL_CUDA_ARCHITECTURES:-80;90}" || exit 1
fi
arbench=$build/bench/arbench
export ARCOLL_TIMEOUT=${ARCOLL_TIMEOUT:-120} ARCOLL_CALIBRATE=off
failed=()

# Runs a check, its output in $out/NAME.txt; a failure is remembered, the others still run.
check() {
  local name=$1 started=$SECONDS
  shift
  echo "== $name: $*"
  if "$@" >"$out/$name.txt" 2>&1; then
    echo "   ok ($((SECONDS - started)) s)"
  else
    echo "   FAILED ($((SECONDS - started)) s), exit $?:"
    tail -5 "$out/$name.txt" | sed 's/^/   /'
    failed+=("$name")
  fi
}

check kernels "$build/bench/cuda_kernel_bench" --min-bytes 1M --max-bytes 256M --iters 20

for np in 1 2 3 4; do
  check "types-np$np" "$arbench" --np $np --device cuda --coll all -d all -o all -b 4 -e 64K \
    -f 64 -w 1 -n 2
  check "algorithms-np$np" "$arbench" --np $np --device cuda --algo all -b 4 -e 16M -f 64 -w 1 -n 2
  check "sizes-np$np" "$arbench" --np $np --device cuda --coll all -b 16 -e 256M -f 16 -w 1 -n 3 \
    --json "$out/sizes-np$np.json"
done

for staging in by-message whole; do
  pipeline=1M
  [[ $staging == whole ]] && pipeline=1G
  check "tcp-$staging-np2" env ARCOLL_DEVICE_PIPELINE_BYTES=$pipeline "$arbench" --np 2 \
    --transport tcp --device cuda --coll all -b 16 -e 64M -f 16 -w 1 -n 3
  check "speed-tcp-$staging-np2" env ARCOLL_DEVICE_PIPELINE_BYTES=$pipeline "$arbench" --np 2 \
    --transport tcp --device cuda -b 8 -e 256M -f 4 -n auto --json "$out/speed-tcp-$staging-np2.json"
done

check speed-np1 "$arbench" --np 1 --device cuda --compare nccl -b 8 -e 256M -f 4 -n auto \
  --json "$out/speed-np1.json"
for np in 2 4; do
  peers=()
  ((gpus >= np)) && peers=(--compare nccl)
  check "speed-np$np" "$arbench" --np $np --device cuda "${peers[@]}" -b 8 -e 256M -f 4 -n auto \
    --json "$out/speed-np$np.json"
  check "speed-host-np$np" "$arbench" --np $np -b 8 -e 256M -f 4 -n auto \
    --json "$out/speed-host-np$np.json"
  # Whole-call chunks: each chunk costs a stream synchronization on both sides.
  check "speed-chunk256M-np$np" env ARCOLL_CHUNK_BYTES=256M "$arbench" --np $np --device cuda \
    --coll all -b 1M -e 256M -f 4 -n auto --json "$out/speed-chunk256M-np$np.json"
done

# The torch backend: its module built beside arbench where libtorch is found.
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # pip's torch keeps its CMake package inside the Python package.
  torch_cmake=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  if ARCOLL_BUILD_DIR=$build ARCOLL_BUILD_TARGETS=arcoll_torch "$root/scripts/build.sh" \
    -DCMAKE_PREFIX_PATH="$torch_cmake" >"$out/torch-build.txt" 2>&1; then
    check torch env PYTHONPATH="$build/python" OMP_NUM_THREADS=1 USE_LIBUV=0 \
      python3 "$root/tests/torch/test_cuda.py"
  else
    echo "== torch: FAILED to build the module (torch-build.txt)"
    failed+=(torch-build)
  fi
else
  echo "== torch: skipped (no torch with CUDA here)" | tee "$out/torch.txt"
fi

echo "tables in $out"
if ((${#failed[@]} > 0)); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "gpu-check: ok"
