#!/usr/bin/env bash
# arbench across emulated hosts: scripts/cluster.sh makes 2 network namespaces of 2 ranks each,
# joined by 1 Gbit/s links, and a small checked sweep must run over shared memory within a host
# and TCP between them, with no wrong result. Skipped (77) where namespaces cannot be made (not
# root, unprivileged container).
#
# Usage: bash cluster.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: cluster.sh path/to/arbench}
arbench=$(realpath "$arbench")
export ARCOLL_TIMEOUT=20
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

on_cluster --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
  "$arbench" -b 8 -e 1M -f 8 -n 3 -w 1 --json "$work/run.json"
cat "$work/cluster.txt"
[[ -s $work/run.json ]] || fail "rank 0 wrote no $work/run.json"

"$python" - "$work/run.json" <<'EOF'
import json, sys

run = json.load(open(sys.argv[1]))
meta = run["metadata"]
errors = []

def check(condition, message):
    if not condition:
        errors.append(message)

check(meta["world_size"] == 4, f"world_size {meta['world_size']}, expected 4")
check(meta["nodes"] == 2, f"nodes {meta['nodes']}, expected 2")
check(meta["ranks_per_node"] == 2, f"ranks_per_node {meta['ranks_per_node']}, expected 2")
check(meta["transport"] == "shm+tcp", f"transport '{meta['transport']}', expected 'shm+tcp'")
hosts = [r["host"] for r in meta["ranks"]]
check(len(hosts) == 4 and hosts[0] == hosts[1] and hosts[2] == hosts[3] and hosts[0] != hosts[2],
      f"ranks' hosts {hosts}: expected ranks 0,1 on one host and 2,3 on another")
check([r["node"] for r in meta["ranks"]] == [0, 0, 1, 1], "ranks' node indices are not 0,0,1,1")
sizes = [row["size_bytes"] for row in run["rows"]]
check(sizes == [8, 64, 512, 4096, 32768, 262144], f"row sizes {sizes}, expected 8..256K by 8")
check(run["out_of_bounds"] == 0, f"out_of_bounds {run['out_of_bounds']}")
for row in run["rows"]:
    for group in ("out_of_place", "in_place"):
        check(row[group]["wrong"] == 0,
              f"{row['size_bytes']} B {group}: wrong = {row[group]['wrong']}")
if errors:
    print("FAIL: " + "\nFAIL: ".join(errors), file=sys.stderr)
    sys.exit(1)
EOF

# Nothing of this cluster may remain; its namespaces are named in cluster.sh's description line
# ("... bridge in arc<pid>br"), the hosts' being arc<pid>h<i>.
prefix=$(sed -n 's/.*bridge in \(arc[0-9]*\)br.*/\1/p' "$work/cluster.txt" | head -1)
[[ -n $prefix ]] || fail "cluster.sh did not describe the cluster"
if ip netns list | grep -E "^${prefix}(h[0-9]+|br)( |\$)" >&2; then
  fail "namespaces left behind (above)"
fi
echo "cluster check passed"
