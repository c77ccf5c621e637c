#!/bin/sh
# First-time set-up: make sure the Debian packages tpuemu builds and tests
# against are present.  As root, installs what is missing with apt-get (one update
# first); otherwise prints the command to run.
set -e
need=""
command -v cc >/dev/null 2>&1 || need="$need build-essential"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
if command -v pkg-config >/dev/null 2>&1; then
  pkg-config --exists sdl2 || need="$need libsdl2-dev"
  pkg-config --exists libcjson || need="$need libcjson-dev"
  pkg-config --exists libpng || need="$need libpng-dev"
  pkg-config --exists libzip || need="$need libzip-dev"
else
  need="$need libsdl2-dev libcjson-dev libpng-dev libzip-dev"
fi
# The tests: numpy for the independent functional reference
# (scripts/fx_reference.py, Debian's /usr/bin/python3, not a pyenv one), and
# Xvfb for the viewer's real-window test.
/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || need="$need python3-numpy"
command -v xvfb-run >/dev/null 2>&1 || need="$need xvfb xauth"
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing$need" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $need >/dev/null
else
  echo "deps: missing$need; install with: sudo apt-get install$need" >&2
  exit 1
fi
