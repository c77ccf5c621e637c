#!/bin/sh
# Checks the README's promise on a fresh Debian 12: debootstraps a minimal
# bookworm (plus make and gcc, what a new machine has) into a folder, clones
# this repository into it and runs `make test` there as root, so that
# scripts/deps.sh must install everything else.  Needs root, debootstrap and
# network access to deb.debian.org; takes a few minutes.
# Usage: sh scripts/fresh_debian_check.sh [DIR]   (default /tmp/tpuemu-fresh)
set -eu
dir=${1:-/tmp/tpuemu-fresh}
repo=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "fresh_debian_check: run as root" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh_debian_check: apt-get install debootstrap" >&2; exit 2; }
rm -rf "$dir"
debootstrap --variant=minbase bookworm "$dir" http://deb.debian.org/debian >/dev/null
cp /etc/resolv.conf "$dir/etc/resolv.conf"
mount -t proc proc "$dir/proc"
mount --bind /dev "$dir/dev"
mount -t tmpfs tmpfs "$dir/tmp"
trap 'umount "$dir/tmp" "$dir/dev" "$dir/proc" 2>/dev/null || true' EXIT
git clone -q "$repo" "$dir/root/tpuemu"
chroot "$dir" /bin/sh -c 'apt-get update -qq &&
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make gcc libc6-dev >/dev/null &&
  cd /root/tpuemu && make test'
