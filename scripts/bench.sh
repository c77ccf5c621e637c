#!/bin/sh
# make bench: prints the figures recorded in BENCHMARKS.md.
set -e
build/bench "$@"
