#!/usr/bin/env bash
# The parameter server with server hosts of their own on the emulated cluster (--ps-servers
# ranks on a host apart), checked against the reference. Needs root and network namespaces
# (skipped, with the reason, where they are missing). Usage: parameter_server_cluster.sh ARBENCH
set -euo pipefail
arbench=$1
source "$(dirname "$0")/lib/common.sh"
on_cluster --quiet --hosts 2 --ranks-per-host 1 --server-hosts 1 -- \
  "$arbench" --ps-servers 1 --algo ps -b 64K -e 1M -f 4 -n 3 -w 1
grep -q "Out of bounds values : 0 OK" "$work/cluster.txt" ||
  fail "server hosts' results: $(cat "$work/cluster.txt")"
echo "parameter server on server hosts: all checks passed"
