#!/usr/bin/env bash
# arbench train end to end, in a few dozen steps: every policy keeps the replicas identical
# (arbench train checks every rank's weights bit for bit after each run and fails otherwise),
# arcoll-, Gloo- and MPI-trained weights agree from the same seed, the throughput models run,
# the layer profile is a replay model, an elastic run goes on without a killed rank, and a bad
# data set, ranks that disagree on the batch and a killed rank (not elastic) each end with a
# clear error. Usage: train.sh ARBENCH
set -euo pipefail
arbench=$1
source "$(dirname "$0")/lib/common.sh"
export OMP_NUM_THREADS=1

if "$arbench" train --list-models >"$work/models.txt" 2>"$work/models.err"; then :; else
  status=$?
  if grep -q "this build has no arbench train" "$work/models.err"; then
    echo "SKIPPED: $(cat "$work/models.err")"
    exit 77
  fi
  fail "arbench train --list-models exited with $status: $(cat "$work/models.err")"
fi

# The throughput models have the replayer's parameter counts.
for model in alexnet googlenet resnet50; do
  grep -E "^$model +([0-9]+) parameters \(replayer: \1\)" "$work/models.txt" >/dev/null ||
    fail "$model's parameter count differs from the replayer's: $(grep "^$model" "$work/models.txt")"
done

# 1. Every policy, 3 ranks, buckets small enough that lenet's gradients take several. One
# epoch: each epoch ends with the test set's evaluation, much of a run's time here, so the
# runs here evaluate on the first 500 test images (the epochs' boundaries are crossed in 7.
# below).
"$arbench" train --np 3 --backends arcoll --policy sync-after-backward,wfbp,buckets,fusion \
  --bucket-bytes 256K --steps 12 --epochs 1 --test-images 500 --json "$work/policies.json" \
  >"$work/policies.txt" ||
  fail "training with every policy failed: $(cat "$work/policies.txt")"
grep -q "^# arbench train: lenet .* on Fashion-MNIST (accuracy on the first 500 test images)" \
  "$work/policies.txt" || fail "the header does not say what was evaluated: $(head -2 "$work/policies.txt")"
$python - "$work/policies.json" <<'PY' || fail "the policies' results are wrong: $(cat "$work/policies.txt")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "arbench.train/1", d["schema"]
assert d["metadata"]["test_images"] == 500, d["metadata"]
runs = d["runs"]
assert [r["configuration"]["policy"] for r in runs] == ["sync-after-backward", "wfbp", "buckets", "fusion"], runs
buckets = {r["configuration"]["policy"]: r["buckets"] for r in runs}
assert buckets["sync-after-backward"] == 1 and buckets["wfbp"] == 4 and buckets["buckets"] >= 2, buckets
parameters = d["metadata"]["parameters"]
for r in runs:
    # 12 iterations, every gradient once per iteration.
    assert r["bytes_allreduced"] == 12 * parameters * 4, (r["bytes_allreduced"], parameters)
    assert len(r["curve"]) == 1 and 0.1 < r["final_accuracy"] <= 1, r["curve"]
    assert 0 < r["iteration_p50_s"] <= r["iteration_p95_s"], r
    assert r["peak_rss_mib"] > 0 and r["cpu_user_percent"] > 0, r
PY

"$arbench" report "$work/policies.json" -o "$work/report.html" >/dev/null ||
  fail "arbench report cannot read arbench train's JSON"
grep -q "Test accuracy against training time" "$work/report.html" ||
  fail "the report has no accuracy chart"
[[ $(grep -c "<polyline" "$work/report.html") -eq 4 ]] ||
  fail "the accuracy chart has not one line per run"

# 2. The same seed and data through arcoll, Gloo and MPI: the same weights within float
# rounding (sums in other orders), 3 ranks.
"$arbench" train --np 3 --backends arcoll,gloo,mpi --steps 15 \
  --epochs 1 --test-images 500 --json "$work/backends.json" >"$work/backends.txt" 2>&1 ||
  fail "training through arcoll, gloo and mpi failed: $(cat "$work/backends.txt")"
$python - "$work/backends.json" <<'PY' || fail "backends disagree: $(cat "$work/backends.txt")"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert [r["backend"] for r in runs] == ["arcoll", "gloo", "mpi"], [r["backend"] for r in runs]
for r in runs[1:]:
    assert r["weights_max_difference"] is not None and r["weights_max_difference"] < 1e-4, r
    assert abs(r["final_accuracy"] - runs[0]["final_accuracy"]) < 0.01, (r, runs[0])
PY

# 3. A throughput model on synthetic batches, with a 16-bit wire and error feedback, and the
# layer profile as a replay model the replayer reads.
"$arbench" train --np 2 --model googlenet --backends arcoll --batch 1 --steps 3 --wire bf16+ef \
  --profile-layers "$work/profile.json" >"$work/googlenet.txt" ||
  fail "googlenet on synthetic data failed: $(cat "$work/googlenet.txt")"
grep -q "replay model $work/profile.json predicts" "$work/googlenet.txt" ||
  fail "no prediction from the layer profile: $(cat "$work/googlenet.txt")"
"$arbench" models --model "$work/profile.json" >"$work/profile.txt" ||
  fail "the replayer cannot read the layer profile: $(cat "$work/profile.txt")"
grep -q "6,624,904\|6624904" "$work/profile.txt" || fail "the profile lost parameters: $(cat "$work/profile.txt")"

# 4. A missing and a corrupt data set: exit 2 naming the file; so does a bad --test-images.
expect_usage_error_of "--test-images: '0' is outside 1.." "$arbench" train --np 2 --test-images 0
expect_usage_error_of "--device 'tpu': expected cpu or cuda" "$arbench" train --np 2 --device tpu
# Training on a GPU: where arbench's libtorch sees none (Debian's), refused before any rank
# starts; where it sees one, a short run.
status=0
timeout 240 "$arbench" train --np 2 --device cuda --backends arcoll --steps 6 --epochs 1 \
  --test-images 100 >"$work/cuda.out" 2>"$work/cuda.err" || status=$?
if [[ $status -eq 2 ]]; then
  grep -qF -- "--device cuda: this libtorch sees no CUDA device" "$work/cuda.err" ||
    fail "--device cuda without CUDA: $(cat "$work/cuda.err")"
else
  [[ $status -eq 0 ]] || fail "--device cuda exited with $status: $(cat "$work/cuda.err")"
fi
# Steps that are all untimed warm-up would report 0 ms per iteration as if measured.
expect_usage_error_of "--steps 3 over 1 epoch(s) leaves nothing to time" \
  "$arbench" train --np 2 --steps 3 --epochs 1
expect_usage_error_of "--test-images: alexnet trains on synthetic batches" \
  "$arbench" train --np 2 --model alexnet --test-images 100
expect_usage_error_of "$work/none/train-images-idx3-ubyte.gz: not found" \
  "$arbench" train --np 2 --backends arcoll --data "$work/none"
mkdir "$work/corrupt"
cp /usr/share/datasets/fashion-mnist/*labels* "$work/corrupt/"
head -c 100000 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz >"$work/corrupt/train-images-idx3-ubyte.gz"
cp /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz "$work/corrupt/"
expect_usage_error_of "$work/corrupt/train-images-idx3-ubyte.gz" \
  "$arbench" train --np 2 --backends arcoll --data "$work/corrupt"

# 5. Elastic training: rank 1 of 3 dies at step 10; the others shrink, re-shard and finish,
# their replicas identical (checked at the end), and the launcher takes the kill as planned.
# Its flags refuse what cannot be.
"$arbench" train --np 3 --backends arcoll --elastic --kill 1@10 --steps 20 --epochs 1 \
  --test-images 500 >"$work/elastic.txt" 2>&1 || fail "the elastic run failed: $(cat "$work/elastic.txt")"
grep -q "a rank was lost at step 10: .* 2 ranks go on" "$work/elastic.txt" ||
  fail "the elastic run does not say what the loss cost: $(cat "$work/elastic.txt")"
grep -qE "^ +arcoll +buckets" "$work/elastic.txt" || fail "no result row: $(cat "$work/elastic.txt")"
expect_usage_error_of "--kill: only an --elastic run" "$arbench" train --np 3 --kill 1@20
expect_usage_error_of "--elastic: only arcoll's exchange" \
  "$arbench" train --np 3 --backends arcoll,gloo --elastic
expect_usage_error_of "--kill's rank: '3' is outside 0..2" \
  "$arbench" train --np 3 --backends arcoll --elastic --kill 3@5

# 6. Two ranks started by hand that disagree on the batch: both exit 2, naming it.
port=$($python "$(dirname "$0")/../support/free_port.py")
for r in 0 1; do
  ARCOLL_RANK=$r ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ARCOLL_MASTER_PORT=$port \
    "$arbench" train --backends arcoll --steps 6 --epochs 1 --batch $((32 + 32 * r)) \
    >"$work/mismatch.$r.out" 2>"$work/mismatch.$r.err" &
  pids[$r]=$!
done
for r in 0 1; do
  status=0
  wait "${pids[$r]}" || status=$?
  [[ $status -eq 2 ]] || fail "rank $r exited with $status, not 2: $(cat "$work/mismatch.$r.err")"
done
grep -qF "rank 1 was started with '64' where rank 0 has '32'" "$work/mismatch.1.err" ||
  fail "rank 1 did not name the batch: $(cat "$work/mismatch.1.err")"
grep -qF "rank 1 was started with other arguments" "$work/mismatch.0.err" ||
  fail "rank 0 did not name rank 1: $(cat "$work/mismatch.0.err")"

# 7. A rank killed mid-training: the launcher names it, the others fail naming it within
# their timeout.
start=$(date +%s)
ARCOLL_TIMEOUT=10 "$arbench" train --np 3 --backends arcoll --steps 8 --epochs 1000 --test-images 500 \
  >"$work/kill.out" 2>"$work/kill.err" &
launcher=$!
# A check that fails below must not leave the job training.
trap 'pkill -9 -P "$launcher" || true; kill -9 "$launcher" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  grep -q "epoch 1:" "$work/kill.out" 2>/dev/null && break
  sleep 0.5
done
children=($(pgrep -P "$launcher" | sort -n))
[[ ${#children[@]} -eq 3 ]] || fail "expected 3 ranks under the launcher, found ${#children[@]}"
kill -9 "${children[1]}"
status=0
wait "$launcher" || status=$?
elapsed=$(($(date +%s) - start))
[[ $status -ne 0 ]] || fail "arbench train exited 0 although rank 1 was killed"
grep -q "rank 1 killed by signal 9" "$work/kill.err" || fail "the launcher did not name rank 1: $(cat "$work/kill.err")"
grep -E "^arbench train: rank 0: .*rank 1" "$work/kill.err" >/dev/null ||
  fail "rank 0 did not fail naming rank 1: $(cat "$work/kill.err")"
((elapsed < 120)) || fail "the job took $elapsed s to end after the kill"
echo "train: all checks passed"
