#!/usr/bin/env bash
# arbench and the examples under torchrun, spelled as this platform's torch (1.13) takes it:
# --nproc_per_node, --no_python to start a binary, and --redirects 1 --tee 1 (Debian's
# torchrun fails without them). Rank and size come from torchrun's RANK/WORLD_SIZE; the
# rendezvous from its MASTER_ADDR and MASTER_PORT+1 (torch's own store holds MASTER_PORT).
# The README's and examples/' torchrun lines are these. Usage: torchrun.sh ARBENCH
set -u
arbench=$1
source "$(dirname "$0")/lib/common.sh"
if ! command -v torchrun >/dev/null; then
  echo "SKIPPED: torchrun not installed (python3-torch)"
  exit 77
fi
examples=$(dirname "$arbench")/../examples
unset ARCOLL_MASTER_ADDR ARCOLL_MASTER_PORT ARCOLL_RANK ARCOLL_WORLD_SIZE ARCOLL_JOB_TOKEN

# A free port whose successor is free too (torch's store, then arcoll's), picked for each job
# just before it starts.
free_port_pair() { $python "$(dirname "$0")/../support/free_port.py" --pair; }

run_torchrun() {  # name, then the program and its arguments
  local name=$1 code=0 port
  shift
  port=$(free_port_pair)
  timeout 120 torchrun --nproc_per_node 2 --no_python --redirects 1 --tee 1 \
    --master_addr 127.0.0.1 --master_port "$port" "$@" >"$work/$name.out" 2>&1 || code=$?
  cat "$work/$name.out"
  # --tee 1 prefixes each line with its worker ("[default0]:").
  sed -i -E 's/^\[[a-z]+[0-9]+\]://' "$work/$name.out"
  [[ $code -eq 0 ]] || fail "$name under torchrun exited $code"
}

run_torchrun arbench "$arbench" -b 1K -e 64K -f 4 -n 5
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +f32 +sum' "$work/arbench.out")
[[ $rows -ge 4 ]] || fail "arbench under torchrun: expected 4 rows (1K..64K), got $rows"
grep -q "^# Out of bounds values : 0 OK" "$work/arbench.out" || fail "arbench: wrong values"
grep -qE "^#  Rank  1 " "$work/arbench.out" || fail "arbench: not a 2-rank world"

for example in example_allreduce example_allreduce_c; do
  [[ -x $examples/$example ]] || fail "$examples/$example is not built"
  run_torchrun "$example" "$examples/$example"
  # Rank r gives r + i at index i: the sums over 2 ranks are 2i + 1.
  grep -qE "sum over 2 ranks.*: 1 3 5 7 9 11 13 15$" "$work/$example.out" \
    || fail "$example: not the sums over 2 ranks"
done
echo "torchrun check passed"
