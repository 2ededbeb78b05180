#!/usr/bin/env bash
# arbench models: the replayer's built-in networks (their counts are checked against the
# published ones by tests/replay), a model file read the same way, and bad model names and
# files rejected with exit 2 naming what is wrong.
#
# Usage: bash models.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: models.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

"$arbench" models >"$work/models.txt" || fail "arbench models exited with $?"
for model in alexnet googlenet inception_v3 resnet50 vgg16; do
  grep -q "^$model " "$work/models.txt" || fail "no $model in: $(cat "$work/models.txt")"
done

# Layers in gradient order: the classifier first, the first convolution last.
"$arbench" models --model resnet50 --layers >"$work/layers.txt" || fail "--layers exited with $?"
first=$(grep -m1 '^  ' "$work/layers.txt" | awk '{print $1}')
last=$(grep '^  ' "$work/layers.txt" | tail -1 | awk '{print $1}')
[[ $first == fc && $last == conv1 ]] || fail "gradient order: first $first, last $last"

cat >"$work/mine.csv" <<'CSV'
layer,parameters,forward_flops,backward_flops
conv,1728,1e6,2e6
fc,10010,2e4,4e4
CSV
"$arbench" models --model "$work/mine.csv" >"$work/mine.txt" || fail "model file exited with $?"
grep -q " 2 *11738 " "$work/mine.txt" || fail "model file summary: $(cat "$work/mine.txt")"

expect_usage_error_of "known: alexnet" "$arbench" models --model lenet
expect_usage_error_of "cannot be read" "$arbench" models --model "$work/missing.json"
printf 'layer,parameters\nconv,3\n' >"$work/bad.csv"
expect_usage_error_of "header" "$arbench" models --model "$work/bad.csv"
echo '{"layers": [{"name": "a", "forward_flops": "x", "backward_flops": 1}]}' >"$work/bad.json"
expect_usage_error_of "layers[0].forward_flops" "$arbench" models --model "$work/bad.json"
expect_usage_error_of "image is too small" "$arbench" models --model alexnet --image-size 32
echo "models: ok"
