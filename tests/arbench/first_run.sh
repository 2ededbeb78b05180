#!/usr/bin/env bash
# End-to-end check of arbench's first run (no arguments): it compares arcoll with its peers,
# keeps its steady ratios per host and commit in the cache folder, and the next run marks a
# ratio that lies more than 25% from a kept one as moved; a kept line it cannot read is left
# out with a warning, and the file is written again whole.
#
# Usage: bash first_run.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: first_run.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
export ARCOLL_CACHE_DIR=$work/cache

timeout 240 "$arbench" >"$work/first.txt" 2>"$work/first.err" ||
  fail "the first run exited with $?: $(cat "$work/first.err")"
kept=("$work"/cache/first-runs-*.txt)
[[ ${#kept[@]} -eq 1 && -f ${kept[0]} ]] || fail "the first run kept no ratios: $(ls "$work/cache")"
grep -qF "(moved" "$work/first.txt" && fail "a run with no earlier run says moved: $(cat "$work/first.txt")"

# An earlier run that no run can agree with at the largest size, and a line nobody can read.
"$python" - "${kept[0]}" <<'PY' || fail "the kept file: $(cat "${kept[0]}")"
import sys
path = sys.argv[1]
lines = open(path).read().splitlines()
assert lines[0].startswith("arbench first runs on "), lines[0]
assert lines[1] == "run", lines[1]
ratios = [l.split() for l in lines[2:]]
assert ratios and all(len(r) == 4 and float(r[3]) > 0 for r in ratios), ratios
peer = ratios[0][0]
largest = max(int(r[2]) for r in ratios if r[0] == peer)
ratios = [r for r in ratios if not (r[0] == peer and int(r[2]) == largest)]
ratios.append([peer, "allreduce", str(largest), "1000"])
with open(path, "w") as f:
    f.write("\n".join(lines[:2] + [" ".join(r) for r in ratios] + ["not a ratio"]) + "\n")
PY

timeout 240 "$arbench" >"$work/second.txt" 2>"$work/second.err" ||
  fail "the second run exited with $?: $(cat "$work/second.err")"
grep -qE "line [0-9]+ cannot be read; it is left out" "$work/second.err" ||
  fail "an unreadable kept line gave no warning: $(cat "$work/second.err")"

"$python" - "${kept[0]}" "$work/second.txt" <<'PY' || fail "the second run: $(cat "$work/second.txt")"
import math, re, sys
path, table = sys.argv[1], open(sys.argv[2]).read()
lines = open(path).read().splitlines()
assert lines.count("run") == 2, lines
assert all(l == "run" or len(l.split()) == 4 for l in lines[1:]), lines
earlier = [l.split() for l in lines[2:lines.index("run", 2)]]
peer = earlier[-1][0]
summary = [l for l in table.splitlines() if l.startswith("# arcoll vs " + peer + ":")]
assert len(summary) == 1, summary
# The ratio at the largest size was 1000 in the earlier run: moved.
assert "at 128 MiB (moved: x1000.00 in an earlier run)" in summary[0] or \
       "at 128 MiB (noisy) (moved: x1000.00 in an earlier run)" in summary[0], summary[0]
# Every ratio marked moved lies more than 25% from the earlier value it names, a kept one.
values = {float(r[3]) for r in earlier}
for now, then in re.findall(r"x([0-9.]+) at [^,;(]+(?:\(noisy\) )?\(moved: x([0-9.]+)", table):
    now, then = float(now), float(then)
    assert max(now, then) / min(now, then) > 1.25, (now, then)
    assert any(math.isclose(then, v, rel_tol=0.01) for v in values), (then, values)
assert "# moved: the ratios marked (moved)" in table, table
PY
echo "first run: ok"
