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
