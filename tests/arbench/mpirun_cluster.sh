#!/usr/bin/env bash
# mpirun across 2 emulated hosts of 2 ranks (scripts/cluster.sh --mpirun), arcoll beside Open
# MPI over the shaped links: every rank on its host (2 nodes for arcoll), Open MPI's results
# checked as arcoll's. Needs mpirun, root and network namespaces (skipped, with the reason,
# where one is missing). Usage: mpirun_cluster.sh ARBENCH
set -u
arbench=$1
if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun not installed"
  exit 77
fi
if ((EUID != 0)); then
  echo "SKIPPED: network namespaces need root (running as uid $EUID)"
  exit 77
fi
unset ARCOLL_MASTER_ADDR ARCOLL_MASTER_PORT ARCOLL_RANK ARCOLL_WORLD_SIZE
cluster=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../../scripts/cluster.sh")
out=$(mktemp)
json=$(mktemp)
trap 'rm -f "$out" "$json"' EXIT
code=0
timeout 180 "$cluster" --quiet --hosts 2 --ranks-per-host 2 --rate 1gbit --mpirun -- \
  "$arbench" --compare mpi -b 64K -e 1M -f 16 -n 3 -w 1 --json "$json" >"$out" 2>&1 || code=$?
cat "$out"
if ((code == 77)); then
  echo "SKIPPED: cluster.sh cannot emulate hosts here"
  exit 77
fi
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
echo "mpirun across emulated hosts passed"
