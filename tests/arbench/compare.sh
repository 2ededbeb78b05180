#!/usr/bin/env bash
# arbench compare on result files made to differ in known ways: an unchanged run passes, a row
# that lost bandwidth beyond the threshold fails with exit 1 naming it, the same loss within
# the measured noise passes, a missing row fails and is listed, and bad input exits 2. Then
# --repeat and --min-busbw on a real sweep.
#
# Usage: bash compare.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: compare.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

# A sweep's results in arbench's JSON: sizes 1 KiB .. 4 MiB, busbw from a formula, each group
# with repetitions spread by `cv` around the median; `factor` scales one size's busbw (and its
# time inversely), `drop` leaves that size out.
make_results() {  # file cv factor drop
  "$python" - "$@" <<'PY'
import json, sys
path, cv, factor, drop = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "drop"
rows = []
for i, size in enumerate(1024 * 4**k for k in range(7)):
    if drop and size == 65536:
        continue
    busbw = size / (size + 100000.0) * 5 * (factor if size == 65536 else 1)
    time = size / busbw / 1000 if busbw else 1.0
    group = {"time_us": time, "algbw_gbs": busbw, "busbw_gbs": busbw, "wrong": 0,
             "spread": {"repeats": 5, "min_us": time * (1 - cv), "median_us": time,
                        "max_us": time * (1 + cv), "p99_us": time * (1 + cv), "cv": cv}}
    rows.append({"backend": "arcoll", "size_bytes": size, "count": size // 4, "type": "f32",
                 "op": "sum", "root": -1, "out_of_place": group, "in_place": dict(group),
                 "predicted_us": None})
json.dump({"schema": "arcoll.arbench/1",
           "metadata": {"transport": "loopback", "algorithm": "auto: ring above 0 B", "world_size": 4},
           "rows": rows, "out_of_bounds": 0, "avg_busbw_gbs": 1.0}, open(path, "w"))
PY
}

expect_exit() {  # code text-on-stdout command...
  local code=$1 says=$2 status=0
  shift 2
  "$@" >"$work/out.txt" 2>&1 || status=$?
  [[ $status -eq $code ]] || fail "$* exited with $status, not $code: $(cat "$work/out.txt")"
  grep -qF -- "$says" "$work/out.txt" || fail "$*: no '$says' in: $(cat "$work/out.txt")"
}

make_results "$work/base.json" 0.01 1 keep
make_results "$work/same.json" 0.01 1 keep
make_results "$work/slower.json" 0.01 0.7 keep
make_results "$work/noisy.json" 0.3 0.7 keep
make_results "$work/faster.json" 0.01 1.3 keep
make_results "$work/missing.json" 0.01 1 drop

expect_exit 0 "PASSED: none of 7 matched row(s)" "$arbench" compare "$work/base.json" "$work/same.json"
expect_exit 1 "FAILED: 1 of 7 matched row(s) regressed" "$arbench" compare "$work/base.json" "$work/slower.json"
grep -E "^ +65536 .* -30\.0% .*REGRESSED" "$work/out.txt" >/dev/null || fail "no REGRESSED 64 KiB row: $(cat "$work/out.txt")"
[[ $(grep -c REGRESSED "$work/out.txt") -eq 1 ]] || fail "rows other than 64 KiB flagged: $(cat "$work/out.txt")"
# 30% down, but two runs as noisy as these differ by that much by chance.
expect_exit 0 "noise" "$arbench" compare "$work/base.json" "$work/noisy.json"
expect_exit 0 "improved" "$arbench" compare "$work/base.json" "$work/faster.json"
expect_exit 0 "PASSED" "$arbench" compare --threshold 40% "$work/base.json" "$work/slower.json"
expect_exit 1 "1 row(s) only in the base" "$arbench" compare "$work/base.json" "$work/missing.json"
grep -qF "arcoll (auto) loopback f32 sum np=4 65536 B" "$work/out.txt" || fail "missing row not named: $(cat "$work/out.txt")"
# The other way round, the extra row is listed but nothing regressed.
expect_exit 0 "1 row(s) only in the new run" "$arbench" compare "$work/missing.json" "$work/base.json"

echo '{"schema": "arcoll.arbench/1", "metadata": {}, "rows": []}' >"$work/bad.json"
expect_usage_error_of "metadata.transport: missing" "$arbench" compare "$work/base.json" "$work/bad.json"
echo '{"schema": ' >"$work/broken.json"
expect_usage_error_of "not JSON" "$arbench" compare "$work/broken.json" "$work/base.json"
expect_usage_error_of "cannot be read" "$arbench" compare "$work/base.json" "$work/nowhere.json"
expect_usage_error_of "--threshold" "$arbench" compare --threshold 5x "$work/base.json" "$work/same.json"

# A real sweep with --repeat: its spread in the JSON and a cv column; --min-busbw as a gate.
"$arbench" --np 2 -b 1K -e 64K -f 8 -n 3 -w 1 --repeat 4 --json "$work/real.json" >"$work/real.txt" 2>&1 ||
  fail "arbench --repeat: $(cat "$work/real.txt")"
grep -q "cv(%)" "$work/real.txt" || fail "no cv column: $(cat "$work/real.txt")"
"$python" - "$work/real.json" <<'PY' || fail "spread: $(head -c 2000 "$work/real.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["metadata"]["repeat"] == 4
for row in j["rows"]:
    for g in (row["out_of_place"], row["in_place"]):
        s = g["spread"]
        assert s["repeats"] == 4 and s["min_us"] <= s["median_us"] <= s["p99_us"] <= s["max_us"], s
        assert s["median_us"] == g["time_us"] and s["cv"] >= 0, g
PY
expect_exit 0 "PASSED" "$arbench" compare --threshold 99 "$work/real.json" "$work/real.json"
expect_exit 1 "# FAILED: average bus bandwidth" "$arbench" --np 2 -b 1K -e 1K -n 2 --min-busbw 1000
expect_exit 0 "Avg bus bandwidth" "$arbench" --np 2 -b 1K -e 1K -n 2 --min-busbw 0
expect_usage_error_of "--min-busbw" "$arbench" --np 2 --min-busbw fast
expect_usage_error_of "--repeat" "$arbench" --np 2 --repeat 0
echo "compare: ok"
