#!/usr/bin/env bash
# The same arbench binary under Open MPI's mpirun, with no rendezvous address given: rank 0's
# address travels through MPI (across emulated hosts: mpirun_cluster.sh). Usage: mpirun.sh ARBENCH
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

echo "mpirun check passed"
