#!/usr/bin/env bash
# Runs a command inside a Debian 13 (trixie) root: arcoll's second target, where Debian's torch
# is 2.x. The root is made once with debootstrap from this machine's Debian mirror and kept
# outside the clone for every later run (ARCOLL_DEBIAN13_ROOT, default
# ~/.cache/arcoll/debian13; about 3 minutes, and 2 GB once the torch packages are in). For each
# run it mounts /proc, /sys, /dev/shm, /dev/pts and this clone (at /arcoll, the working folder)
# into the root, copies /etc/hosts and /etc/resolv.conf in, and unmounts everything on exit.
# Runs are serialised on a lock beside the root.
#
# Usage: scripts/debian13.sh [COMMAND [ARGS...]]   (default: a shell)
# Example: scripts/debian13.sh scripts/install-deps.sh
#
# Exit status: COMMAND's; 77 when this machine cannot make or enter the root (not root, no
# debootstrap, no mirror reachable).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
root=${ARCOLL_DEBIAN13_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/arcoll/debian13}

skip() { echo "debian13: $*; skipped" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (chroot and mounts)"

# The mirror this machine's apt uses (never a fixed host): the first URIs of a stanza, or deb
# line, that is not the security archive.
mirror() {
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' |
        grep -v security | head -1 || true)
  [ -n "$uri" ] || uri=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' |
                         grep -v security | head -1 || true)
  echo "$uri"
}

mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9
# A run killed before it could unmount (SIGKILL) left its mounts in the root. None is in use
# while this run holds the lock: they are undone, deepest first, before the root is made or
# entered (a stale /arcoll of a deleted clone fails the bind below, and remaking the root must
# never delete through them).
while read -r stale; do umount -l "$stale" 2>/dev/null || true; done < <(
  awk -v under="$root/" 'index($2, under) == 1 {print $2}' /proc/self/mounts | sort -r)

if [ ! -e "$root/.arcoll-ready" ]; then
  command -v debootstrap >/dev/null || skip "debootstrap is not installed (apt-get install debootstrap)"
  source_uri=$(mirror)
  [ -n "$source_uri" ] || skip "no Debian mirror in this machine's apt sources"
  echo "debian13: making the root in $root from $source_uri (once; a few minutes)" >&2
  rm -rf "$root.partial"
  debootstrap --variant=minbase --include=python3,sudo,git,ca-certificates trixie \
    "$root.partial" "$source_uri" >"$root.debootstrap.log" 2>&1 ||
    { tail -20 "$root.debootstrap.log" >&2; skip "debootstrap failed (log: $root.debootstrap.log)"; }
  rm -rf "$root"
  mv "$root.partial" "$root"
  touch "$root/.arcoll-ready"
fi

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
bind() {  # bind SOURCE TARGET-IN-ROOT
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  mounted+=("$root$2")
}
mkdir -p "$root/proc"
mount -t proc proc "$root/proc"
mounted+=("$root/proc")
bind /sys /sys
bind /dev/shm /dev/shm
bind /dev/pts /dev/pts
bind "$repo" /arcoll
cp /etc/hosts "$root/etc/hosts"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

[ $# -gt 0 ] || set -- bash
# A clean environment, but arcoll's own settings (ARCOLL_*) pass through.
mapfile -t settings < <(env | grep '^ARCOLL_' || true)
chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${settings[@]}" \
  bash -c 'cd /arcoll && exec "$@"' debian13 "$@"
