# What the arbench end-to-end scripts share, sourced after they read their arguments:
# $python (Debian's, with the modules the checks use), $work (a scratch folder removed on
# exit), a default deadline for every wait, and fail().
python=/usr/bin/python3
[[ -x $python ]] || python=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ARCOLL_TIMEOUT=${ARCOLL_TIMEOUT:-30}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Runs a command that must be refused as a usage error: exit code 2, nothing on stdout, and a
# message on stderr that contains $1.
expect_usage_error_of() {
  local says=$1 status=0
  shift
  timeout 60 "$@" >"$work/usage.out" 2>"$work/usage.err" || status=$?
  [[ $status -eq 2 ]] || fail "$* exited with $status, not 2: $(cat "$work/usage.err")"
  grep -qF -- "$says" "$work/usage.err" || fail "$*: stderr does not say '$says': $(cat "$work/usage.err")"
  [[ ! -s $work/usage.out ]] || fail "$* printed on stdout: $(cat "$work/usage.out")"
}

# For the tests over emulated hosts: scripts/cluster.sh with these arguments (its output in
# $work/cluster.txt, 180 s at most). Exits 77 (skipped) when not root or when cluster.sh
# cannot make namespaces here; fails on any other error.
on_cluster() {
  if ((EUID != 0)); then
    echo "SKIPPED: emulating hosts with network namespaces needs root (running as uid $EUID)"
    exit 77
  fi
  local code=0
  # timeout sends SIGTERM, on which cluster.sh still removes its namespaces.
  timeout 180 "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/cluster.sh" "$@" \
    >"$work/cluster.txt" 2>&1 || code=$?
  if ((code == 77)); then
    cat "$work/cluster.txt"
    echo "SKIPPED: cluster.sh cannot emulate hosts here (see its message above)"
    exit 77
  fi
  ((code == 0)) || fail "cluster.sh $* exited with $code: $(cat "$work/cluster.txt")"
}
