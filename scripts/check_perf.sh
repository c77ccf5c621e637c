#!/bin/sh
# The performance gate (docs/CHECK.md).  For every
# traces/reference/*.json: `tpuemu run T --report build/perf/X.json --quiet --no-range`
# then `tpuemu check --baseline baselines/X.json build/perf/X.json` (check
# compares step times, not the ranges over the unconfirmed assumptions, so
# the runs skip them).
# Exit 1 on any regression, missing baseline, baseline without a reference
# trace (orphan) or failed run; a summary line at the end.  With --rebaseline, copy the new reports into baselines/ (the
# diff is then reviewed like code).
#
# Environment: TPUEMU (binary, default ./tpuemu), TOLERANCE (passed to
# check --tolerance, default check's own 0.02).
set -u
cd "$(dirname "$0")/.."
LC_ALL=C
export LC_ALL

rebase=0
case "${1:-}" in
  --rebaseline) rebase=1 ;;
  "") ;;
  *) echo "usage: scripts/check_perf.sh [--rebaseline]" >&2; exit 2 ;;
esac
bin=${TPUEMU:-./tpuemu}
tol=${TOLERANCE:+--tolerance $TOLERANCE}
mkdir -p build/perf baselines

ntrace=$(ls traces/reference/*.json 2>/dev/null | wc -l)
if [ "$ntrace" -eq 0 ]; then
  echo "check-perf: no traces in traces/reference" >&2
  exit 1
fi

ok=0 slower=0 errors=0
for t in traces/reference/*.json; do
  x=$(basename "$t")
  new=build/perf/$x
  rm -f "$new"
  "$bin" run "$t" --report "$new" --quiet --no-range >build/perf/"$x".log 2>&1
  rc=$?
  # Exit 3 (does not fit) still writes a report: a reference trace that
  # stops fitting shows up as a regression in check.
  if [ ! -s "$new" ]; then
    echo "check-perf: $t: run failed (exit $rc):" >&2
    tail -n 5 build/perf/"$x".log >&2
    errors=$((errors + 1))
    continue
  fi
  if [ "$rebase" -eq 1 ]; then
    cp "$new" baselines/"$x"
    echo "rebaselined: baselines/$x"
    ok=$((ok + 1))
    continue
  fi
  if [ ! -f baselines/"$x" ]; then
    echo "check-perf: $t has no baseline (run 'make rebaseline' and commit baselines/$x)" >&2
    errors=$((errors + 1))
    continue
  fi
  printf '%s: ' "$x"
  # shellcheck disable=SC2086
  "$bin" check --baseline baselines/"$x" "$new" $tol
  case $? in
    0) ok=$((ok + 1)) ;;
    1) slower=$((slower + 1)) ;;
    *) errors=$((errors + 1)) ;;
  esac
done

# A baseline whose trace is gone guards nothing: the trace was deleted or
# renamed, and the gate would silently stop checking it.
for b in baselines/*.json; do
  [ -e "$b" ] || continue
  x=$(basename "$b" .json)
  if [ ! -f traces/reference/"$x".json ]; then
    echo "check-perf: baseline $x has no reference trace: deleted or renamed? remove it or restore the trace" >&2
    errors=$((errors + 1))
  fi
done

if [ "$rebase" -eq 1 ]; then
  echo "check-perf: rebaselined $ok of $ntrace traces, $errors failed; review and commit baselines/"
  [ "$errors" -eq 0 ]
  exit $?
fi
echo "check-perf: $ntrace traces: $ok ok, $slower slower, $errors errors"
[ "$slower" -eq 0 ] && [ "$errors" -eq 0 ]
