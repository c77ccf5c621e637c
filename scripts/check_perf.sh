#!/bin/sh
# PLACEHOLDER until the performance gate lands (issue 7).
echo "check-perf: no baselines yet"
