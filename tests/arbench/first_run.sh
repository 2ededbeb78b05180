#!/usr/bin/env bash
# End-to-end check of arbench's first run (no arguments): it compares arcoll with its peers,
# marks a summary ratio that lies more than 25% from one an earlier first run of this host and
# commit kept as moved, leaves out a kept line it cannot read (with a warning), and keeps its
# own steady ratios after the earlier ones.
#
# Usage: bash first_run.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: first_run.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
export ARCOLL_CACHE_DIR=$work/cache
mkdir -p "$ARCOLL_CACHE_DIR"

# The file arbench keeps them in: named by host and commit, headed by the CPU model ("host vm:
# AMD EPYC" from topo, "(git 1a2b3c)" from --version), as file names keep to [A-Za-z0-9.-].
topo=$(timeout 60 "$arbench" topo | head -1)
[[ $topo =~ ^host\ ([^:]+):\ (.*)$ ]] || fail "arbench topo's first line: $topo"
host=${BASH_REMATCH[1]} cpu=${BASH_REMATCH[2]}
[[ $(timeout 60 "$arbench" --version) =~ \(git\ ([^\)]+)\) ]] || fail "arbench --version"
commit=${BASH_REMATCH[1]}
safe() { sed 's/[^A-Za-z0-9.-]/_/g' <<<"$1"; }
kept=$ARCOLL_CACHE_DIR/first-runs-$(safe "$host")-$(safe "$commit").txt
# An earlier run that no run agrees with at the largest size, and a line nobody can read.
printf 'arbench first runs on %s\nrun\nmpi allreduce 134217728 1000\ngloo allreduce 134217728 1000\nnot a ratio\n' \
  "$cpu" >"$kept"

timeout 240 "$arbench" >"$work/run.txt" 2>"$work/run.err" ||
  fail "the first run exited with $?: $(cat "$work/run.err")"
grep -qE "line 5 cannot be read; it is left out" "$work/run.err" ||
  fail "an unreadable kept line gave no warning: $(cat "$work/run.err")"

"$python" - "$kept" "$work/run.txt" <<'PY' || fail "$(cat "$work/run.txt")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
table = open(sys.argv[2]).read()
# The earlier run kept whole but for the unreadable line, then this run's ratios.
assert lines[:4] == lines[:1] + ["run", "mpi allreduce 134217728 1000",
                                 "gloo allreduce 134217728 1000"], lines[:4]
assert lines.count("run") == 2 and lines[4] == "run", lines
mine = [l.split() for l in lines[5:]]
assert mine and all(len(r) == 4 and float(r[3]) > 0 for r in mine), mine
# The first peer's summary says the largest size moved from the earlier x1000; no ratio at
# another size, which no earlier run kept, is marked.
summary = [l for l in table.splitlines() if re.match(r"# arcoll vs (mpi|gloo):", l)]
assert summary, table
assert re.search(r"at 128 MiB (\(noisy\) )?\(moved: x1000\.00 in an earlier run\)", summary[0]), summary[0]
for marked in re.findall(r"at ([^,;(]+?) (?:\(noisy\) )?\(moved", table):
    assert marked == "128 MiB", marked
assert "# moved: the ratios marked (moved)" in table, table
PY
echo "first run: ok"
