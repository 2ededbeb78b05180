#!/usr/bin/env bash
# arbench topo: this host's cores, NUMA nodes, memory and network interfaces, as text and
# JSON, and a plain statement of what is missing (no GPU, no RDMA device) rather than silence.
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
PY
"$arbench" topo --json /nonexistent/dir/topo.json >/dev/null 2>"$work/err.txt" && fail "unwritable --json accepted"
grep -q -- "--json" "$work/err.txt" || fail "unwritable --json: $(cat "$work/err.txt")"
echo "topo: ok"
