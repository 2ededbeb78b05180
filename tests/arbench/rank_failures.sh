#!/usr/bin/env bash
# arbench with a rank killed mid-run, with a rank that never starts and with a stopped rank
# (arcoll's, and MPI's under mpirun): every other rank must exit non-zero within
# ARCOLL_TIMEOUT, naming the missing rank or the call, and the launcher ends the job.
# Usage: rank_failures.sh ARBENCH
set -u
arbench=$1
out=$(mktemp -d)
trap 'rm -rf "$out"; pkill -9 -P $$ 2>/dev/null' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# Runs COMMAND (`name`: its output's file names) in the background, sends SIGNAL to rank
# `victim` of its `ranks` ranks once they have run for 2 s, and waits for it: sets code,
# elapsed (ms from the signal) and children. Ranks that do not all come within 30 s (mpirun,
# on a loaded machine, may take more than 2 s to start them) fail the case and end the job.
signal_mid_run() {
  local signal=$1 victim=$2 ranks=$3 name=$4
  shift 4
  local launcher tries=0
  "$@" >"$out/$name.out" 2>"$out/$name.err" &
  launcher=$!
  children=()
  while [ ${#children[@]} -lt "$ranks" ] && [ "$tries" -lt 300 ]; do
    sleep 0.1
    tries=$((tries + 1))
    children=($(pgrep -P "$launcher" | sort -n))
  done
  if [ ${#children[@]} -ne "$ranks" ]; then
    fail "expected $ranks ranks under the launcher, found ${#children[@]}"
    pkill -9 -P "$launcher"
    kill -9 "$launcher"
  else
    sleep 2
    kill "-$signal" "${children[$victim]}"
  fi
  local start
  start=$(now_ms)
  wait "$launcher"
  code=$?
  elapsed=$(($(now_ms) - start))
  cat "$out/$name.err"
}

# 1. Rank 2 of 4 is killed while the sweep runs.
signal_mid_run KILL 2 4 kill env ARCOLL_TIMEOUT=10 "$arbench" --np 4 -b 4M -e 4M -n 1000000 -w 1
[ "$code" -ne 0 ] || fail "arbench exited 0 although rank 2 was killed"
grep -q "rank 2 killed by signal 9" "$out/kill.err" || fail "the launcher did not report rank 2's death"
for r in 0 1 3; do
  prefix=""
  [ "$r" -ne 0 ] && prefix="\[rank $r\] "
  grep -E "^${prefix}arbench: rank $r: .*rank 2" "$out/kill.err" >/dev/null \
    || fail "rank $r did not report an error naming rank 2"
  grep -q "rank $r exited with code" "$out/kill.err" || fail "rank $r did not exit non-zero"
done
[ "$elapsed" -lt $(((10 + 5) * 1000)) ] || fail "took ${elapsed} ms, more than the timeout allows"

# 2. A world of 4 where rank 3 never starts (ranks started by hand, as a launcher would).
port=$(/usr/bin/python3 "$(dirname "$0")/../support/free_port.py")
start=$(now_ms)
pids=()
for r in 0 1 2; do
  ARCOLL_RANK=$r ARCOLL_WORLD_SIZE=4 ARCOLL_MASTER_ADDR=127.0.0.1 ARCOLL_MASTER_PORT=$port \
    ARCOLL_TIMEOUT=3 "$arbench" -b 1K -e 1K >"$out/missing.$r.out" 2>"$out/missing.$r.err" &
  pids+=($!)
done
for r in 0 1 2; do
  wait "${pids[$r]}"
  code=$?
  cat "$out/missing.$r.err"
  [ "$code" -ne 0 ] || fail "rank $r exited 0 although rank 3 never started"
  grep -q "rank(s) 3 of 4 did not join" "$out/missing.$r.err" || fail "rank $r did not name rank 3"
done
elapsed=$(($(now_ms) - start))
[ "$elapsed" -lt $(((3 + 5) * 1000)) ] || fail "missing rank detected after ${elapsed} ms, timeout was 3 s"

# 3. Rank 1 of 3 is stopped (SIGSTOP) mid-run: the others fail within ARCOLL_TIMEOUT naming it,
# and the launcher terminates the stopped rank ARCOLL_LAUNCH_GRACE later, names it and fails.
signal_mid_run STOP 1 3 stop env ARCOLL_TIMEOUT=3 ARCOLL_LAUNCH_GRACE=2 \
  "$arbench" --np 3 -b 1M -e 1M -n 1000000 -w 1
[ "$code" -ne 0 ] || fail "arbench exited 0 although rank 1 was stopped"
grep -q "rank 1 was still running after another rank had failed: the launcher terminated it" \
  "$out/stop.err" || fail "the launcher did not name the stopped rank 1"
# Rank 0 may wait on rank 2, which waits on the stopped rank 1, and may have finished the call
# they are still in: it then names rank 1 among the ranks not in its call ("1" or "1, 2").
grep -E "arbench: rank 0: .*(rank 1|ranks not waiting in this call: ([0-9]+, )*1(, [0-9]+)*$)" \
  "$out/stop.err" >/dev/null ||
  fail "rank 0 did not report an error naming rank 1"
# The 3 s timeout, the 2 s grace, and margin.
[ "$elapsed" -lt $(((3 + 2 + 5) * 1000)) ] || fail "the stopped job took ${elapsed} ms to end"

# 4. MPI as the peer (under mpirun) with rank 1 of 2 stopped mid-run: MPI waits without end,
# so arbench's watch ends rank 0 within ARCOLL_TIMEOUT naming the MPI call, and mpirun the job.
"$arbench" --np 1 --backend mpi -b 8 -e 8 -n 1 -w 0 >"$out/probe.txt" 2>&1
if grep -q "built without" "$out/probe.txt" || ! command -v mpirun >/dev/null; then
  echo "skipped: MPI stopped mid-call (no MPI backend or mpirun here)"
else
  signal_mid_run STOP 1 2 mpi env ARCOLL_TIMEOUT=3 \
    "$arbench" --np 2 --backend mpi -b 1M -e 1M -n 1000000 -w 1
  [ "$code" -ne 0 ] || fail "arbench exited 0 although MPI's rank 1 was stopped"
  grep -E "^arbench: rank 0: MPI_Allreduce of 1048576 B has not returned after 3\.[0-9] s" \
    "$out/mpi.err" >/dev/null || fail "rank 0 did not name the MPI call it waited in"
  # The 3 s timeout, and margin.
  [ "$elapsed" -lt $(((3 + 5) * 1000)) ] || fail "the stopped MPI job took ${elapsed} ms to end"
  for child in "${children[@]}"; do
    ps -o stat= -p "$child" | grep -q T && fail "MPI's stopped rank (pid $child) outlived the job"
  done
fi

if [ "$failures" -eq 0 ]; then echo "rank failure checks: all passed"; exit 0; fi
exit 1
