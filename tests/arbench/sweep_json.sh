#!/usr/bin/env bash
# End-to-end check of arbench: a small sweep over 3 forked ranks must print a row per size with
# no wrong elements, and its JSON and CSV files must hold the same numbers as the table; bad
# flags must exit 2 with a message naming the flag.
#
# Usage: bash sweep_json.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: sweep_json.sh path/to/arbench}
export ARCOLL_TIMEOUT=30
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

# 1. A checked sweep with both output files.
timeout 120 "$arbench" --np 3 -b 8 -e 256K -f 4 -w 1 -n 3 -d f32,i32 -o sum,max \
  --json "$work/run.json" --csv "$work/run.csv" >"$work/table.txt" 2>"$work/stderr.txt" ||
  fail "arbench exited with $? (stderr: $(cat "$work/stderr.txt"))"

# 2. An unchecked sweep over every type and operator: #wrong must read N/A.
timeout 120 "$arbench" --np 3 -b 1K -e 4K -f 4 -w 0 -n 1 -d all -o all -c 0 \
  --json "$work/nocheck.json" >"$work/nocheck.txt" 2>"$work/nocheck_stderr.txt" ||
  fail "arbench -c 0 exited with $? (stderr: $(cat "$work/nocheck_stderr.txt"))"

"$python" - "$work" <<'EOF'
import csv, json, math, sys

work = sys.argv[1]
errors = []

def check(condition, message):
    if not condition:
        errors.append(message)

def decimals(text):
    return len(text.split(".")[1]) if "." in text else 0

def close_to_printed(value, text):
    # The table rounds to the printed number of decimals.
    return abs(value - float(text)) <= 0.5 * 10 ** -decimals(text) + 1e-9

HEADER = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]

def read_table(path):
    lines = open(path).read().splitlines()
    start = next((i for i, l in enumerate(lines) if l == HEADER[0]), None)
    check(start is not None and lines[start:start + 3] == HEADER,
          f"{path}: the column header differs from nccl-tests'")
    rows = [l.split() for l in lines if l.strip() and not l.startswith("#")]
    for r in rows:
        check(len(r) == 13, f"{path}: row with {len(r)} fields: {r}")
    summary = {}
    for l in lines:
        if l.startswith("# Out of bounds values :"):
            summary["oob"] = l.split(":")[1].split()
        if l.startswith("# Avg bus bandwidth    :"):
            summary["avg"] = l.split(":")[1].strip()
    check("oob" in summary and "avg" in summary, f"{path}: summary lines missing")
    return rows, summary

# --- the checked run -----------------------------------------------------------------------
rows, summary = read_table(f"{work}/table.txt")
doc = json.load(open(f"{work}/run.json"))
check(doc.get("schema") == "arcoll.arbench/1", f"schema is {doc.get('schema')!r}")
meta = doc["metadata"]
for key in ["hostname", "cpu_model", "cores", "memory_bytes", "kernel", "os", "arcoll_version",
            "git_commit", "transport", "algorithm", "world_size", "nodes", "date",
            "command_line", "iters", "warmup_iters", "check", "tcp_congestion",
            "tcp_congestion_system"]:
    check(key in meta, f"metadata.{key} missing")
check(meta.get("tcp_congestion") == "auto", f"tcp_congestion {meta.get('tcp_congestion')!r}")
check(meta.get("world_size") == 3, f"world_size {meta.get('world_size')}")
check(meta.get("iters") == 3 and meta.get("warmup_iters") == 1 and meta.get("check") is True,
      "iters/warmup_iters/check do not match the command line")

sizes = [8 * 4 ** k for k in range(8)]  # 8 B .. 128 KiB
expected_keys = [(s, t, o) for t in ("f32", "i32") for o in ("sum", "max") for s in sizes]
table_keys = [(int(r[0]), r[2], r[3]) for r in rows]
check(table_keys == expected_keys, f"table rows {table_keys} != expected {expected_keys}")
check(len(doc["rows"]) == len(rows), f"{len(doc['rows'])} JSON rows for {len(rows)} table rows")

for r, j in zip(rows, doc["rows"]):
    where = f"row {r[:4]}"
    check([j["size_bytes"], j["count"], j["type"], j["op"], j["root"]] ==
          [int(r[0]), int(r[1]), r[2], r[3], int(r[4])], f"{where}: JSON keys {j}")
    check(j["count"] * 4 == j["size_bytes"], f"{where}: count and size disagree")
    for group, base in (("out_of_place", 5), ("in_place", 9)):
        g = j[group]
        time, algbw, busbw, wrong = r[base:base + 4]
        check(close_to_printed(g["time_us"], time), f"{where} {group}: time {g['time_us']} vs {time}")
        check(close_to_printed(g["algbw_gbs"], algbw), f"{where} {group}: algbw {g['algbw_gbs']} vs {algbw}")
        check(close_to_printed(g["busbw_gbs"], busbw), f"{where} {group}: busbw {g['busbw_gbs']} vs {busbw}")
        check(g["wrong"] == 0 and wrong == "0", f"{where} {group}: #wrong {wrong} / {g['wrong']}")
        if g["time_us"] > 0:
            algbw_ = j["size_bytes"] / g["time_us"] / 1e3
            check(math.isclose(g["algbw_gbs"], algbw_, rel_tol=1e-9), f"{where} {group}: algbw formula")
            check(math.isclose(g["busbw_gbs"], algbw_ * 4 / 3, rel_tol=1e-9), f"{where} {group}: busbw formula")

check(summary.get("oob") == ["0", "OK"], f"out of bounds line {summary.get('oob')}")
check(doc.get("out_of_bounds") == 0, "out_of_bounds in JSON")
avg = doc.get("avg_busbw_gbs", -1)
check(math.isclose(avg, float(summary.get("avg", "nan")), rel_tol=1e-5, abs_tol=1e-6),
      f"avg bus bandwidth {avg} vs {summary.get('avg')}")

with open(f"{work}/run.csv", newline="") as f:
    lines = list(csv.DictReader(f))
check(len(lines) == 2 * len(doc["rows"]), f"{len(lines)} CSV lines for {len(doc['rows'])} rows")
for i, line in enumerate(lines):
    j = doc["rows"][i // 2]
    group = "out_of_place" if i % 2 == 0 else "in_place"
    g = j[group]
    check(line["placement"] == group, f"CSV line {i}: placement {line['placement']}")
    check(int(line["size_bytes"]) == j["size_bytes"] and line["type"] == j["type"] and
          line["op"] == j["op"], f"CSV line {i}: keys")
    check(float(line["time_us"]) == g["time_us"] and float(line["busbw_gbs"]) == g["busbw_gbs"] and
          float(line["algbw_gbs"]) == g["algbw_gbs"], f"CSV line {i}: numbers differ from JSON")
    check(line["wrong"] == "0", f"CSV line {i}: wrong {line['wrong']}")
    check(line["world_size"] == "3" and line["git_commit"] == meta["git_commit"],
          f"CSV line {i}: metadata")

# --- the unchecked run over every type and operator ----------------------------------------
rows, summary = read_table(f"{work}/nocheck.txt")
doc = json.load(open(f"{work}/nocheck.json"))
types = ["f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64"]
ops = ["sum", "prod", "min", "max", "avg"]
pairs = [(t, o) for t in types for o in ops if o != "avg" or t in ("f32", "f64", "f16", "bf16")]
check(sorted({(r[2], r[3]) for r in rows}) == sorted(pairs), "-d all -o all: type/op pairs")
check(len(rows) == 2 * len(pairs), f"-d all -o all: {len(rows)} rows")
check(all(r[8] == "N/A" and r[12] == "N/A" for r in rows), "-c 0: #wrong must be N/A")
check(all(j["out_of_place"]["wrong"] is None and j["in_place"]["wrong"] is None
          for j in doc["rows"]), "-c 0: JSON wrong must be null")

if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(1)
EOF

# 3. Bad flags: exit code 2, a message naming the flag and the value, and nothing run.
expect_usage_error() {
  local needle=$1
  shift
  expect_usage_error_of "$needle" "$arbench" --np 2 "$@"
  for value in "$@"; do
    [[ $value == -* ]] && continue
    grep -qF -- "$value" "$work/usage.err" || fail "arbench $*: stderr does not show $value"
  done
}
expect_usage_error --datatype -d nosuchtype
expect_usage_error --minbytes -b 12Q
expect_usage_error --json --json /nonexistent/dir/x.json
expect_usage_error --nosuchflag --nosuchflag
expect_usage_error --op -d i32 -o avg

# --memcpy: a single-core copy beside arcoll, size by size, unchecked, with a ratio column.
"$arbench" --np 2 --memcpy -b 1K -e 64K -f 8 -w 1 -n 3 >"$work/memcpy.txt" 2>&1 ||
  fail "--memcpy exited $?: $(cat "$work/memcpy.txt")"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +f32 +sum \| .* \| .* N/A +x[0-9.]+ +-$' "$work/memcpy.txt")
[[ $rows -eq 3 ]] || fail "--memcpy: expected 3 rows with an arcoll and a memcpy group, got $rows: $(cat "$work/memcpy.txt")"
grep -q "^# backend memcpy: " "$work/memcpy.txt" || fail "--memcpy: no memcpy backend line"
grep -q "^# backend ceiling: " "$work/memcpy.txt" || fail "--memcpy: no ceiling backend line"
grep -qE "^# arcoll vs ceiling: x[0-9.]+ at 64 KiB \(busbw ratio\)$" \
  "$work/memcpy.txt" || fail "--memcpy: no line of arcoll against the ceiling: $(cat "$work/memcpy.txt")"

# -n auto: each group times as many iterations as fill its target (at least 5), the same on
# every rank, reported per group (how close to 50 ms they come is a matter of timing, not
# checked here); the ceiling's busbw is an all-reduce's, 2 (n-1) / n of its algbw.
"$arbench" --np 3 --memcpy -n auto -b 8 -e 1M -f 32 -w 1 --json "$work/auto.json" \
  >"$work/auto.txt" 2>&1 || fail "-n auto exited $?: $(cat "$work/auto.txt")"
grep -q "iters: auto (50 ms per size and group, at least 5)" "$work/auto.txt" ||
  fail "-n auto: the header does not say so: $(head -5 "$work/auto.txt")"
"$python" - "$work/auto.json" <<'PY' || fail "-n auto: $(cat "$work/auto.txt")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["metadata"]["iters"] == "auto" and d["metadata"]["target_time_s"] == 0.05, d["metadata"]
rows = d["rows"]
assert sorted({r["backend"] for r in rows}) == ["arcoll", "ceiling", "memcpy"], rows
for r in rows:
    for g in (r["out_of_place"], r["in_place"]):
        assert g["iters"] >= 5, r
    if r["backend"] == "ceiling":
        g = r["out_of_place"]
        assert abs(g["busbw_gbs"] - g["algbw_gbs"] * 2 * 2 / 3) <= 1e-9 * g["algbw_gbs"], r
PY

# -n auto over passes: the header says at least 5 timed iterations in all, one per pass (3
# passes: 2 each), and every pass is timed. At 1 MiB the target, not that minimum, sets the
# count; the minimum decides only where one call lasts a fifth of the target or more, which the
# first run meets (first_run.sh) and no check here can count on.
"$arbench" --np 2 -n auto --repeat 3 -b 1M -e 1M -w 1 --json "$work/auto_passes.json" \
  >"$work/auto_passes.txt" 2>&1 || fail "-n auto --repeat 3 exited $?: $(cat "$work/auto_passes.txt")"
grep -q "iters: auto (50 ms per size and group in each of 3 passes, at least 6 in all)" \
  "$work/auto_passes.txt" || fail "-n auto --repeat 3: $(head -5 "$work/auto_passes.txt")"
"$python" - "$work/auto_passes.json" <<'PY' || fail "-n auto --repeat 3: $(cat "$work/auto_passes.txt")"
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    for g in (r["out_of_place"], r["in_place"]):
        assert g["iters"] >= 2 and len(g["spread"]["passes_us"]) == 3, r
PY

# --repeat: passes through the sizes; every pass in the JSON, the row's time their median; a
# ratio is marked noisy (? in its row) exactly when the per-pass ratios' interquartile range
# exceeds 25% of their lower quartile.
"$arbench" --np 2 --memcpy --repeat 4 -b 1K -e 256K -f 4 -w 1 -n 3 --json "$work/passes.json" \
  >"$work/passes.txt" 2>&1 || fail "--repeat 4 exited $?: $(cat "$work/passes.txt")"
"$python" - "$work/passes.json" "$work/passes.txt" <<'PY' || fail "--repeat: $(cat "$work/passes.txt")"
import json, sys
d = json.load(open(sys.argv[1]))
def quantile(values, q):  # numpy's linear interpolation
    v = sorted(values)
    at = q * (len(v) - 1)
    low = int(at)
    high = min(low + 1, len(v) - 1)
    return v[low] + (v[high] - v[low]) * (at - low)
rows = {(r["backend"], r["size_bytes"]): r for r in d["rows"]}
sizes = sorted({r["size_bytes"] for r in d["rows"]})
assert len(sizes) == 5, sizes
expected = {}
for size in sizes:
    mine = rows[("arcoll", size)]["out_of_place"]
    for backend in ("memcpy", "ceiling"):
        theirs = rows[(backend, size)]["out_of_place"]
        for g in (mine, theirs):
            assert len(g["spread"]["passes_us"]) == 4, g
            assert abs(quantile(g["spread"]["passes_us"], 0.5) - g["time_us"]) <= 1e-6 * g["time_us"], g
        ratios = [t / m for m, t in zip(mine["spread"]["passes_us"], theirs["spread"]["passes_us"])]
        expected[(size, backend)] = quantile(ratios, 0.75) / quantile(ratios, 0.25) > 1.25
text = open(sys.argv[2]).read().splitlines()
table = [l for l in text if l.split("|")[0].split()[2:4] == ["f32", "sum"]]
assert len(table) == 5, table
for line in table:
    parts = line.split("|")
    size = int(parts[0].split()[0])
    for backend, part in zip(("memcpy", "ceiling"), parts[2:]):
        ratio = part.split()[3]  # time, busbw, #wrong, ratio, the ratio in place
        assert ratio.endswith("?") == expected[(size, backend)], (line, expected)
# The summary lines give the references' ratios at the largest size; "# noisy:" follows when
# one they give is noisy.
largest = sizes[-1]
for backend in ("memcpy", "ceiling"):
    line = next(l for l in text if l.startswith("# arcoll vs %s: " % backend))
    assert ("(noisy)" in line) == expected[(largest, backend)], (line, expected)
assert any(l.startswith("# noisy:") for l in text) == (expected[(largest, "memcpy")] or expected[(largest, "ceiling")]), text
assert any("medians of 4 passes" in l for l in text), text
PY

echo "arbench sweep/JSON/CSV checks passed"
