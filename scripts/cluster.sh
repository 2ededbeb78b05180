#!/usr/bin/env bash
# Emulates a cluster of H hosts on this one machine: each host is a Linux network namespace
# joined to a shared bridge by a veth pair whose two ends are rate-shaped with tc tbf, so that
# ranks on one host talk through shared memory and ranks on different hosts through TCP over a
# link of known speed. It then starts L ranks of COMMAND per host with arcoll's launcher
# variables set, waits for them, and removes everything it created, also on failure, Ctrl-C and
# SIGTERM.
#
# Usage:
#   scripts/cluster.sh --hosts H --ranks-per-host L [--server-hosts K] [--rate RATE]
#                      [--delay DELAY] [--slow HOST=RATE]... [--port PORT] [--grace SECONDS]
#                      [--mpirun] [--quiet] -- COMMAND [ARGS...]
#
#   --hosts H            number of hosts (network namespaces), 1..250
#   --ranks-per-host L   ranks started in each host; rank = host * L + local rank
#   --server-hosts K     K more hosts of one rank each, ranks H*L .. H*L+K-1: dedicated
#                        parameter servers (arbench --ps-servers K) with links of their own
#   --rate RATE          link speed of every host, each direction, in tc's units (100mbit, 1gbit,
#                        125mbps = bytes/s); default: unshaped (veth speed, CPU-bound)
#   --slow HOST=RATE     host index HOST gets RATE instead (repeatable), e.g. --slow 1=100mbit
#   --delay DELAY        one-way host-to-host delay (tc netem, e.g. 1ms); when the kernel has no
#                        netem, a warning is printed and the links are only rate-shaped
#   --port PORT          ARCOLL_MASTER_PORT (default: random in 20000..40000)
#   --grace SECONDS      after a rank fails, how long the others may take to fail on their own
#                        before they are killed (default 15)
#   --quiet              do not print the one-line description of the cluster
#   --mpirun             start COMMAND once under Open MPI's mpirun, run from host 0, whose
#                        ranks (L per host) it places on the hosts through this script as its
#                        rsh agent (`--rsh-agent ADDRESS COMMAND`: COMMAND in the namespace that
#                        holds ADDRESS); each rank gets ARCOLL_NODE_ID and CLUSTER_HOST as below,
#                        and Open MPI's shared-memory segments a folder per host (the hosts share
#                        /dev/shm here). MPI and arcoll then go over the shaped links between hosts
#                        (arbench --compare mpi on the cluster). Open MPI yields while it waits:
#                        the hosts share this machine's cores.
#
# Example: 2 hosts of 2 ranks on 1 Gbit/s links, an all-reduce sweep:
#   scripts/cluster.sh --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
#       build/bench/arbench -b 1M -e 64M -f 4 -n 5
#
# Each rank runs as `ip netns exec NS env ARCOLL_RANK=... COMMAND ARGS` with ARCOLL_RANK,
# ARCOLL_WORLD_SIZE, ARCOLL_LOCAL_RANK, ARCOLL_LOCAL_SIZE, ARCOLL_MASTER_ADDR (host 0's address),
# ARCOLL_MASTER_PORT, ARCOLL_JOB_TOKEN (one per run) and ARCOLL_NODE_ID=<machine>#host<h>.
# arcoll uses shm within a node id and tcp across; the "<machine>#" part is arcoll's mark of an
# emulated host: it tells arcoll that the hosts share this machine's cores, so that with more ranks than cores its waits yield the
# CPU while they poll (with plain "host<h>" names, 2 hosts x 2 ranks on 2 cores took ~4 ms per
# small all-reduce instead of ~40 us). Also set: CLUSTER_HOSTS, CLUSTER_RANKS_PER_HOST,
# CLUSTER_SERVER_HOSTS, CLUSTER_HOST (this rank's host index), CLUSTER_NETNS (its namespace)
# and CLUSTER_BRIDGE_NETNS (e.g. `tc -n "$CLUSTER_BRIDGE_NETNS" -s qdisc` shows the bridge side's queues; host h's port
# there is h<h>, the host's own interface is eth0).
# Rank 0's output goes to the terminal; the other ranks' output goes to log files that are
# printed, prefixed with [rank N], for the ranks that fail.
#
# Exit status: 0 when every rank exited 0; else the first non-zero status seen (128+N for a
# rank killed by signal N; ranks that end at the same moment are seen in rank order); 2 for a
# usage error; 77 when this machine cannot emulate hosts (not root, or namespaces, veth, bridge
# or tbf unavailable: ctest's "skipped"); 130/143 when interrupted by SIGINT/SIGTERM.
#
# Needs root, iproute2 (ip, tc) and a kernel with veth, bridge and sch_tbf. Only network
# namespaces are used: ranks share the file system, /dev/shm, PIDs and IPC with this machine.
set -euo pipefail

prog=${0##*/}

usage() {
  sed -n '/^# Usage:/,/^#   --quiet/p' "$0" | sed 's/^# \{0,1\}//'
}

die_usage() {
  echo "$prog: $*" >&2
  echo "usage: $prog --hosts H --ranks-per-host L [--rate RATE] [--delay DELAY]" \
    "[--server-hosts K] [--slow HOST=RATE]... [--port PORT] [--grace SECONDS] [--mpirun] [--quiet]" \
    "-- COMMAND [ARGS...]" >&2
  exit 2
}

# Bytes per second for a tc rate (number + optional unit, as tc reads it: a bare number or
# "bit" is bits/s, "bps" is bytes/s, SI and IEC prefixes); fails on anything else, so that a
# typo is a usage error before anything is created.
rate_bytes() {
  awk -v r="$1" 'BEGIN {
    if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit 1
    n = substr(r, 1, RLENGTH) + 0; u = tolower(substr(r, RLENGTH + 1))
    f["bit"] = 1; f["bps"] = 8
    split("k m g t", si, " "); split("ki mi gi ti", iec, " ")
    for (i = 1; i <= 4; i++) {
      f[si[i] "bit"] = 1000 ^ i; f[si[i] "bps"] = 8 * 1000 ^ i
      f[iec[i] "bit"] = 1024 ^ i; f[iec[i] "bps"] = 8 * 1024 ^ i
    }
    if (u == "") u = "bit"
    if (!(u in f) || n * f[u] < 8) exit 1
    printf "%.0f\n", n * f[u] / 8
  }'
}

# --- mpirun's agent and its ranks (--mpirun) ---------------------------------------------

# mpirun starts its daemons as `AGENT ADDRESS COMMAND`, as it would through ssh.
if [[ ${1:-} == --rsh-agent ]]; then
  address=$2
  shift 2
  for ns in $(ip netns list | awk '{print $1}'); do
    if ip -n "$ns" -4 addr show dev eth0 2>/dev/null | grep -q "inet $address/"; then
      exec ip netns exec "$ns" sh -c "$*"
    fi
  done
  echo "$prog: --rsh-agent: no host of a running cluster has address $address" >&2
  exit 1
fi
# Each rank mpirun starts: its host from its namespace (<prefix>h<host>), then COMMAND.
if [[ ${1:-} == --mpi-rank ]]; then
  shift
  ns=$(ip netns identify $$)
  export CLUSTER_NETNS=$ns CLUSTER_HOST=${ns##*h} ARCOLL_NODE_ID="$(uname -n)#host${ns##*h}"
  export OMPI_MCA_btl_vader_backing_directory="$CLUSTER_MPI_SHM/$ns"
  mkdir -p "$OMPI_MCA_btl_vader_backing_directory"
  exec "$@"
fi

# --- arguments ---------------------------------------------------------------------------

hosts="" ranks_per_host="" server_hosts=0 rate="" delay="" port="" grace=15 quiet=0 mpirun=0
declare -A slow=()
while (($#)); do
  opt=$1 val="" has_val=0
  if [[ $opt == --*=* ]]; then
    val=${opt#*=} opt=${opt%%=*} has_val=1
  fi
  case $opt in
    --hosts | --ranks-per-host | --server-hosts | --rate | --delay | --slow | --port | --grace)
      if ((!has_val)); then
        (($# >= 2)) || die_usage "$opt needs a value"
        val=$2
        shift
      fi
      case $opt in
        --hosts) hosts=$val ;;
        --ranks-per-host) ranks_per_host=$val ;;
        --server-hosts) server_hosts=$val ;;
        --rate) rate=$val ;;
        --delay) delay=$val ;;
        --port) port=$val ;;
        --grace) grace=$val ;;
        --slow)
          [[ $val =~ ^([0-9]+)=(.+)$ ]] || die_usage "--slow wants HOST=RATE, got '$val'"
          slow[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
          ;;
      esac
      shift
      ;;
    --quiet) quiet=1 && shift ;;
    --mpirun) mpirun=1 && shift ;;
    -h | --help) usage && exit 0 ;;
    --) shift && break ;;
    -*) die_usage "unknown option '$opt'" ;;
    *) break ;; # the command, without a "--" before it
  esac
done
(($#)) || die_usage "no command given (put it after --)"

if ! [[ $hosts =~ ^[0-9]+$ ]] || ((hosts < 1 || hosts > 250)); then
  die_usage "--hosts must be a number of hosts in 1..250, got '$hosts'"
fi
if ! [[ $ranks_per_host =~ ^[0-9]+$ ]] || ((ranks_per_host < 1)); then
  die_usage "--ranks-per-host must be a number >= 1, got '$ranks_per_host'"
fi
if ! [[ $server_hosts =~ ^[0-9]+$ ]] || ((hosts + server_hosts > 250)); then
  die_usage "--server-hosts must be a number of hosts, with --hosts at most 250, got '$server_hosts'"
fi
[[ -z $rate ]] || rate_bytes "$rate" >/dev/null || die_usage "--rate: '$rate' is not a tc rate like 1gbit or 100mbit"
for h in "${!slow[@]}"; do
  ((h < hosts + server_hosts)) ||
    die_usage "--slow $h=${slow[$h]}: there is no host $h (hosts are 0..$((hosts + server_hosts - 1)))"
  rate_bytes "${slow[$h]}" >/dev/null || die_usage "--slow $h=${slow[$h]}: not a tc rate like 100mbit"
done
[[ -z $delay || $delay =~ ^[0-9]+(\.[0-9]+)?(s|sec|secs|ms|msec|msecs|us|usec|usecs)$ ]] ||
  die_usage "--delay: '$delay' is not a time like 2ms"
[[ -z $port ]] || { [[ $port =~ ^[0-9]+$ ]] && ((port >= 1 && port <= 65535)); } ||
  die_usage "--port must be a TCP port, got '$port'"
[[ $grace =~ ^[0-9]+$ ]] || die_usage "--grace must be a whole number of seconds, got '$grace'"

# Each namespace has its own port space, so a random port cannot clash with another run.
port=${port:-$((20000 + RANDOM % 20001))}
# Server hosts come after the workers' hosts, one rank each.
all_hosts=$((hosts + server_hosts))
world=$((hosts * ranks_per_host + server_hosts))

if ((EUID != 0)); then
  echo "$prog: cannot emulate hosts: creating network namespaces needs root (running as uid $EUID)" >&2
  exit 77
fi
if ((mpirun)) && ! command -v mpirun >/dev/null; then
  echo "$prog: --mpirun: mpirun is not installed (openmpi-bin)" >&2
  exit 77
fi
for tool in ip tc; do
  command -v "$tool" >/dev/null || { echo "$prog: cannot emulate hosts: '$tool' (iproute2) is not installed" >&2 && exit 77; }
done

# --- state and cleanup -------------------------------------------------------------------

# Names carry this shell's PID, unique among live processes, so concurrent runs never share a
# name. Interfaces live inside the namespaces, so their short names (eth0, br0, h<i>) cannot
# clash either, and nothing is created in the root namespace but the namespaces themselves.
prefix="arc$$"
bridge_ns="${prefix}br"
host_ns=()
for ((h = 0; h < all_hosts; h++)); do host_ns+=("${prefix}h$h"); done
created_ns=() # what exists and must go, in creation order
declare -A rank_of_pid=()
tmp=""
timer="" # the grace-period timer, while one runs
cleaned=0

# Every process inside our namespaces is ours (the ranks and whatever they started): TERM
# them, give them 2 s to exit, then KILL what is left.
stop_processes() {
  local ns pid pids=() alive i
  for ns in "${created_ns[@]}"; do
    while read -r pid; do [[ -n $pid ]] && pids+=("$pid"); done < <(ip netns pids "$ns" 2>/dev/null || true)
  done
  for pid in "${!rank_of_pid[@]}"; do pids+=("$pid"); done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do
    alive=0
    for pid in "${pids[@]}"; do
      # A zombie child still answers kill -0; it has exited and left its namespace.
      if kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; then
        alive=1 && break
      fi
    done
    ((alive)) || break
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

# shellcheck disable=SC2317 # called from traps, which shellcheck does not follow
cleanup() {
  ((cleaned)) && return 0
  cleaned=1
  trap '' INT TERM HUP # a second Ctrl-C must not cut the cleanup short
  [[ -z $timer ]] || kill "$timer" 2>/dev/null || true
  stop_processes
  wait 2>/dev/null || true # reap them all
  local ns
  # Deleting a namespace destroys the veth ends and the bridge inside it.
  for ns in "${created_ns[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  [[ -z $tmp ]] || rm -rf "$tmp"
  rm -rf "/dev/shm/$prefix-mpi"
}

# shellcheck disable=SC2317
on_signal() {
  echo "$prog: caught SIG$1, stopping the ranks and removing the cluster" >&2
  cleanup
  trap - EXIT
  exit $((128 + $2))
}

trap cleanup EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

# A setup step the machine may not support (namespaces in an unprivileged container, no veth,
# bridge or tbf in the kernel): report what failed and skip (77) rather than fail.
setup() {
  local err
  if ! err=$("$@" 2>&1); then
    echo "$prog: cannot emulate hosts here: '$*' failed: ${err:-no message}" >&2
    exit 77
  fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cluster.XXXXXX")

# --- network -----------------------------------------------------------------------------

# The subnet only has to be unique within this run's bridge (it is invisible elsewhere);
# a random 10.x.y.0/24 also keeps it apart from another run's in tools' output.
subnet="10.$((RANDOM % 256)).$((RANDOM % 256))"

# The bridge gets a namespace of its own so that the root namespace's firewall and
# bridge-netfilter settings never see the cluster's traffic.
for ns in "$bridge_ns" "${host_ns[@]}"; do
  # Recorded first: a signal may land between the creation and the next line.
  created_ns+=("$ns")
  setup ip netns add "$ns"
  setup ip -n "$ns" link set lo up
done
setup ip -n "$bridge_ns" link add br0 type bridge forward_delay 0 stp_state 0
setup ip -n "$bridge_ns" link set br0 up

# tbf parameters for a rate. tbf(8): burst must hold at least one timer tick of traffic,
# rate/HZ; HZ is 250 on this kernel and Debian's (4 ms: 500 KB at 1 Gbit/s), and covers kernels
# with a faster tick. It also stays small beside the messages being timed: a full bucket passes
# at once after an idle pause, 4 ms of extra traffic, ~3% of a 16 MB transfer at 1 Gbit/s.
# At least 16 KiB so that full-size frames always fit. latency 50ms caps the queue at 50 ms of
# traffic, a deep switch buffer (the senders' TCP small-queue limits keep it far from full: no
# drops were seen at 1 Gbit/s).
tbf_args() {
  local bytes
  bytes=$(rate_bytes "$1")
  local burst=$(((bytes + 249) / 250))
  ((burst >= 16384)) || burst=16384
  echo "rate $1 burst $burst latency 50ms"
}

delay_ok=0
if [[ -n $delay ]]; then
  # Probed once on the first host's link: netem is compiled in or not for every link alike.
  if err=$(tc -n "${host_ns[0]}" qdisc add dev lo root netem delay "$delay" 2>&1); then
    delay_ok=1
    tc -n "${host_ns[0]}" qdisc del dev lo root 2>/dev/null || true
  elif [[ $err == *nknown* || $err == *"No such file"* || $err == *"not found"* ]]; then
    echo "$prog: warning: delay not emulated: this kernel has no netem; links are rate-shaped only" >&2
  else
    echo "$prog: warning: delay not emulated: tc netem delay $delay failed ($err); links are rate-shaped only" >&2
  fi
fi

for ((h = 0; h < all_hosts; h++)); do
  ns=${host_ns[$h]}
  # Created inside the bridge namespace with its peer sent straight to the host's namespace.
  setup ip -n "$bridge_ns" link add "h$h" type veth peer name eth0 netns "$ns"
  setup ip -n "$bridge_ns" link set "h$h" master br0 up
  setup ip -n "$ns" addr add "$subnet.$((h + 1))/24" dev eth0
  setup ip -n "$ns" link set eth0 up
  link_rate=${slow[$h]:-$rate}
  # Delay goes on the host's egress only: a packet crosses exactly one host egress on its way
  # to another host, so one-way delay = DELAY and round trip = 2 × DELAY. netem is the root
  # and tbf its child, so packets wait out the delay and are then paced.
  if ((delay_ok)); then
    setup tc -n "$ns" qdisc add dev eth0 root handle 1: netem delay "$delay"
    if [[ -n $link_rate ]]; then
      # shellcheck disable=SC2046 # tbf_args is a list of words
      setup tc -n "$ns" qdisc add dev eth0 parent 1:1 handle 10: tbf $(tbf_args "$link_rate")
    fi
  elif [[ -n $link_rate ]]; then
    # shellcheck disable=SC2046
    setup tc -n "$ns" qdisc add dev eth0 root tbf $(tbf_args "$link_rate")
  fi
  # The other direction: the bridge's egress toward this host.
  if [[ -n $link_rate ]]; then
    # shellcheck disable=SC2046
    setup tc -n "$bridge_ns" qdisc add dev "h$h" root tbf $(tbf_args "$link_rate")
  fi
done

if ((!quiet)); then
  links="${rate:-unshaped} each way"
  for ((h = 0; h < all_hosts; h++)); do
    [[ -z ${slow[$h]:-} ]] || links+=", host $h: ${slow[$h]}"
  done
  if [[ -n $delay ]]; then
    if ((delay_ok)); then links+=", delay $delay one-way"; else links+=", no delay (no netem)"; fi
  fi
  servers=""
  ((server_hosts == 0)) || servers=" + $server_hosts server host(s) of 1 rank"
  echo "$prog: $hosts hosts x $ranks_per_host ranks$servers = $world ranks; links $links;" \
    "subnet $subnet.0/24, master $subnet.1:$port; namespaces ${host_ns[0]}..h$((all_hosts - 1)), bridge in $bridge_ns" >&2
fi

# --- ranks -------------------------------------------------------------------------------

declare -A status_of=() # rank -> exit status, once it has exited
pids=()
machine=$(uname -n)
# The job's secret, as a launcher makes one: only its ranks may connect to each other.
job_token=${ARCOLL_JOB_TOKEN:-$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')}
if ((mpirun)); then
  # One process, mpirun in host 0, stands for the job: its status is the job's.
  slots=()
  for ((h = 0; h < all_hosts; h++)); do slots+=("$subnet.$((h + 1)):$((h < hosts ? ranks_per_host : 1))"); done
  self=$(realpath "$0")
  ip netns exec "${host_ns[0]}" env -u ARCOLL_EMULATED_HOSTS CLUSTER_MPI_SHM="/dev/shm/$prefix-mpi" \
    CLUSTER_HOSTS="$hosts" CLUSTER_RANKS_PER_HOST="$ranks_per_host" \
    CLUSTER_SERVER_HOSTS="$server_hosts" CLUSTER_BRIDGE_NETNS="$bridge_ns" \
    mpirun --allow-run-as-root --oversubscribe --host "$(IFS=,; echo "${slots[*]}")" -np "$world" \
    --mca plm_rsh_agent "$self --rsh-agent" --mca btl self,vader,tcp --mca mpi_yield_when_idle 1 \
    --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "$self" --mpi-rank "$@" &
  pids+=($!)
  rank_of_pid[$!]=0
  world=1
fi
for ((h = 0; h < all_hosts && !mpirun; h++)); do
  local_size=$ranks_per_host
  ((h < hosts)) || local_size=1
  for ((l = 0; l < local_size; l++)); do
    r=$((h < hosts ? h * ranks_per_host + l : hosts * ranks_per_host + h - hosts))
    # ARCOLL_EMULATED_HOSTS would split each namespace again: the namespaces are the hosts.
    cmd=(ip netns exec "${host_ns[$h]}" env -u ARCOLL_EMULATED_HOSTS
      ARCOLL_RANK="$r" ARCOLL_WORLD_SIZE="$world"
      ARCOLL_LOCAL_RANK="$l" ARCOLL_LOCAL_SIZE="$local_size"
      ARCOLL_MASTER_ADDR="$subnet.1" ARCOLL_MASTER_PORT="$port" ARCOLL_NODE_ID="$machine#host$h"
      ARCOLL_JOB_TOKEN="$job_token"
      CLUSTER_HOSTS="$hosts" CLUSTER_RANKS_PER_HOST="$ranks_per_host" CLUSTER_HOST="$h"
      CLUSTER_SERVER_HOSTS="$server_hosts"
      CLUSTER_NETNS="${host_ns[$h]}" CLUSTER_BRIDGE_NETNS="$bridge_ns"
      "$@")
    # ip netns exec and env both exec, so $! is the rank's own process.
    if ((r == 0)); then
      "${cmd[@]}" &
    else
      "${cmd[@]}" >"$tmp/rank$r.log" 2>&1 &
    fi
    pids+=($!)
    rank_of_pid[$!]=$r
  done
done

# Wait for the ranks. After the first failure a timer (a sleep, waited on like the ranks) gives
# the others --grace seconds to fail on their own, as arcoll makes them; when it fires the rest
# are killed.
first_status=0 first_failed="" killed_after_grace=0
running=("${pids[@]}")

# Records rank process $1's exit status $2; starts the grace timer on the first failure.
finished() {
  local r=${rank_of_pid[$1]} pid next=()
  unset "rank_of_pid[$1]"
  status_of[$r]=$2
  for pid in "${running[@]}"; do [[ $pid == "$1" ]] || next+=("$pid"); done
  running=("${next[@]}")
  if (($2 != 0 && first_status == 0)); then
    first_status=$2 first_failed=$r
    if ((${#running[@]})) && [[ -z $timer ]]; then
      sleep "$grace" &
      timer=$!
    fi
  fi
}

while ((${#running[@]})); do
  # A child that died while the shell was busy elsewhere may already be reaped and, when a
  # signal killed it, dropped from the job table: `wait -n` then calls it "no such job", but a
  # plain `wait PID` still has its status.
  for pid in "${running[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      st=0
      wait "$pid" 2>/dev/null || st=$?
      finished "$pid" "$st"
    fi
  done
  ((${#running[@]})) || break
  done_pid="" st=0
  wait -n -p done_pid "${running[@]}" ${timer:+"$timer"} 2>/dev/null || st=$?
  if [[ -z ${done_pid:-} ]]; then
    sleep 0.05 # only already-reaped children: the loop's top collects them
    continue
  elif [[ $done_pid == "$timer" ]]; then
    timer=""
    echo "$prog: ranks still running ${grace} s after rank $first_failed failed; killing them" >&2
    killed_after_grace=1
    stop_processes
  else
    finished "$done_pid" "$st"
  fi
done
if [[ -n $timer ]]; then
  kill "$timer" 2>/dev/null || true
  wait "$timer" 2>/dev/null || true
  timer=""
fi

if ((first_status != 0)); then
  failed=""
  for ((r = 0; r < world; r++)); do
    st=${status_of[$r]:-unknown}
    [[ $st == 0 ]] && continue
    if [[ $st == unknown ]]; then
      why="did not report a status"
    elif ((st > 128)); then
      why="killed by signal $((st - 128))"
    else
      why="exited with $st"
    fi
    ((killed_after_grace && r != first_failed && st > 128)) && why+=" (after the grace period)"
    failed+="${failed:+, }rank $r $why"
    if ((r != 0)) && [[ -s $tmp/rank$r.log ]]; then
      sed "s/^/[rank $r] /" "$tmp/rank$r.log" >&2
    fi
  done
  echo "$prog: failed: $failed" >&2
fi
exit "$first_status"
