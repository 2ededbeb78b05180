#!/usr/bin/env bash
# The same arbench binary under Open MPI's mpirun, with no rendezvous address given: rank 0's
# address travels through MPI; then mpirun across emulated hosts (scripts/cluster.sh --mpirun)
# with arcoll beside Open MPI, both over the shaped links. Usage: mpirun.sh ARBENCH
set -u
arbench=$1
if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun not installed"
  exit 77  # ctest reports it as skipped
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
unset ARCOLL_MASTER_ADDR ARCOLL_MASTER_PORT ARCOLL_RANK ARCOLL_WORLD_SIZE
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$arbench" -b 1K -e 1M -n 5 >"$out" 2>&1
code=$?
cat "$out"
[ "$code" -eq 0 ] || { echo "FAIL: mpirun exited $code"; exit 1; }
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +f32 +sum' "$out")
[ "$rows" -eq 6 ] || { echo "FAIL: expected 6 rows (1K..1M), got $rows"; exit 1; }
grep -q "^# Out of bounds values : 0 OK" "$out" || { echo "FAIL: wrong values"; exit 1; }
grep -qE "^#  Rank  3 " "$out" || { echo "FAIL: not a 4-rank world"; exit 1; }

# Across 2 emulated hosts of 2 ranks: every rank on its host (2 nodes for arcoll), Open MPI's
# results checked as arcoll's. Skipped where hosts cannot be emulated.
if ((EUID == 0)); then
  cluster=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../../scripts/cluster.sh")
  json=$(mktemp)
  trap 'rm -f "$out" "$json"' EXIT
  code=0
  timeout 180 "$cluster" --quiet --hosts 2 --ranks-per-host 2 --rate 1gbit --mpirun -- \
    "$arbench" --compare mpi -b 64K -e 1M -f 16 -n 3 -w 1 --json "$json" >"$out" 2>&1 || code=$?
  cat "$out"
  if ((code == 77)); then
    echo "SKIPPED (cluster part): cluster.sh cannot emulate hosts here"
  else
    [ "$code" -eq 0 ] || { echo "FAIL: cluster.sh --mpirun exited $code"; exit 1; }
    python3 - "$json" <<'PY' || { echo "FAIL: arbench under mpirun across hosts"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
m = d["metadata"]
assert (m["world_size"], m["nodes"], m["transport"]) == (4, 2, "shm+tcp"), m
assert [b["name"] for b in m["backends"]] == ["arcoll", "mpi"], m["backends"]
hosts = [r["host"] for r in m["ranks"]]
assert hosts[0] == hosts[1] != hosts[2] == hosts[3], hosts
rows = d["rows"]
assert len(rows) == 4 and all(r["out_of_place"]["wrong"] == 0 and r["in_place"]["wrong"] == 0 for r in rows), rows
PY
    grep -qE "^# arcoll vs mpi: x[0-9.]+ at 64 KiB, x[0-9.]+ at 1 MiB" "$out" || { echo "FAIL: no summary line"; exit 1; }
  fi
fi
echo "mpirun check passed"
