#!/usr/bin/env bash
# arbench topo: this host's cores, NUMA nodes, memory and network interfaces, as text and
# JSON, and a plain statement of what is missing (no GPU, no RDMA device) rather than silence.
# arbench plan: predictions for every algorithm on the shipped example clusters, and bad
# cluster files rejected with exit 2 naming the field.
#
# Usage: bash topo.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: topo.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

"$arbench" topo --json "$work/topo.json" >"$work/topo.txt" || fail "arbench topo exited with $?"
for text in "core(s)" "NUMA node" "network interfaces" " lo "; do
  grep -qF -- "$text" "$work/topo.txt" || fail "no '$text' in: $(cat "$work/topo.txt")"
done
"$python" - "$work/topo.json" <<'PY' || fail "topo JSON: $(cat "$work/topo.txt")"
import json, os, sys
t = json.load(open(sys.argv[1]))
assert t["schema"] == "arcoll.topology/1", t["schema"]
assert t["logical_cpus"] == os.cpu_count(), (t["logical_cpus"], os.cpu_count())
assert t["physical_cores"] >= 1 and t["memory_bytes"] > 0
assert any(n["loopback"] for n in t["interfaces"]), t["interfaces"]
names = {n["name"] for n in t["interfaces"]}
assert names == set(os.listdir("/sys/class/net")), (names, os.listdir("/sys/class/net"))
notes = " ".join(t["notes"])
if not os.listdir("/sys/class/infiniband") if os.path.isdir("/sys/class/infiniband") else True:
    assert t["rdma_devices"] == [] and "no RDMA device found" in notes, notes
if not t["gpus"]:
    assert "no GPU found" in notes, notes
    assert "CUDA runtime" in notes, notes  # absent from the build, or it sees no GPU
if "hwloc is not in this build" not in notes:  # hwloc's PCI tree, with eth0 on its device
    assert t["pci_devices"], notes
    assert all(d["root"] for d in t["pci_devices"]), t["pci_devices"]
PY
grep -q "PCI devices (hwloc)" "$work/topo.txt" || grep -q "hwloc is not in this build" "$work/topo.txt" ||
  fail "neither a PCI tree nor a note on hwloc: $(cat "$work/topo.txt")"
"$arbench" topo --json /nonexistent/dir/topo.json >/dev/null 2>"$work/err.txt" && fail "unwritable --json accepted"
grep -q -- "--json" "$work/err.txt" || fail "unwritable --json: $(cat "$work/err.txt")"
# With several ranks: where each runs, the classes of link between them, and a Graphviz file.
ARCOLL_EMULATED_HOSTS=2 timeout 60 "$arbench" topo --np 4 --json "$work/cluster.json" \
  --dot "$work/cluster.dot" >"$work/cluster.txt" || fail "arbench topo --np 4 exited with $?"
grep -q "cluster: 4 ranks on 2 host(s)" "$work/cluster.txt" || fail "no cluster line: $(cat "$work/cluster.txt")"
grep -q "same host" "$work/cluster.txt" && grep -q "network (" "$work/cluster.txt" ||
  fail "link classes: $(cat "$work/cluster.txt")"
grep -q "graph cluster" "$work/cluster.dot" && grep -q "rank 3" "$work/cluster.dot" ||
  fail "dot file: $(cat "$work/cluster.dot")"
"$python" - "$work/cluster.json" <<'PY' || fail "cluster JSON"
import json, sys
t = json.load(open(sys.argv[1]))
c = t["cluster"]
assert len(c["hosts"]) == 2 and [r["rank"] for r in c["ranks"]] == [0, 1, 2, 3], c
assert c["ranks"][0]["host"] == c["ranks"][1]["host"] != c["ranks"][2]["host"], c
PY

examples=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../../examples/topologies")
for file in "$examples"/*.json; do
  "$arbench" plan --topology "$file" -b 8 -e 1G -f 32 >"$work/plan.txt" || fail "plan $file exited with $?"
  for algorithm in ring multi_ring recursive_do halving_doub tree hierarchical torus2d; do
    grep -q "$algorithm" "$work/plan.txt" || fail "plan $file has no $algorithm column"
  done
  rows=$(grep -cvE '^#' "$work/plan.txt")
  ((rows == 6)) || fail "plan $file printed $rows rows, expected 6 sizes: $(cat "$work/plan.txt")"
done
echo '{"schema": "arcoll.cluster/1", "hosts": 2, "ranks_per_host": 4}' >"$work/bad.json"
code=0
"$arbench" plan --topology "$work/bad.json" >/dev/null 2>"$work/err.txt" || code=$?
((code == 2)) || fail "an incomplete cluster file exited with $code"
grep -q "field 'intra_host' is missing" "$work/err.txt" || fail "message: $(cat "$work/err.txt")"
echo "topo: ok"
