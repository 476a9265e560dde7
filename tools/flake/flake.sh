#!/usr/bin/env bash
# flake.sh runs the scenario suite (or the specs FOCUS selects) N times, each run with its own Ginkgo JSON
# report and failure dumps, and stops at the first failing run: it prints that run's failures (spec, message,
# location, failure dump). When every run passes it prints "N/N passed" and each spec's min/median/max run
# time over the runs (tools/ginkgoreport summary).
#
# Usage (make flake sets these from its command line):
#   N=<runs> [FOCUS=<spec regexp>] [LABELS=<label filter>] tools/flake/flake.sh
#
# Optional environment: REPORT_DIR=dir puts the runs under dir/flake-<time>/ (default: a new temp dir,
# removed when every run passed or on SIGINT/SIGTERM, kept and named when a run failed);
# GINKGO_FLAGS, more suite flags; SUITE_TIMEOUT, each run's -test.timeout (default 20m).
# Each run is dir/run-<i>/: suite.json (Ginkgo JSON report), output.log (the verbose output) and artifacts/
# (ENSEMBLE_ARTIFACTS: failure dumps). The suite is compiled once; Ginkgo picks a new random order each run.
set -euo pipefail

die() {
  echo "make flake: $*" >&2
  exit 2
}
[[ -n "${N:-}" ]] || die "pass N=<runs>, how many times to run the suite, e.g. make flake N=10 FOCUS=harness"
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "N=$N is not a positive number of runs: pass e.g. N=10"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
assets="$(tools/envtest/build.sh | tail -n1)" || die "the envtest binaries are not usable (see above); make envtest-assets builds them"

if [[ -n "${REPORT_DIR:-}" ]]; then
  mkdir -p "$REPORT_DIR"
  base="$(cd "$REPORT_DIR" && pwd)/flake-$(date +%Y%m%d-%H%M%S)"
  mkdir "$base"
else
  base="$(mktemp -d "${TMPDIR:-/tmp}/ensemble-flake.XXXXXX")"
fi
bin="$base/scenarios.test"
report="$base/ginkgoreport"
# keep is set once a run failed: a temporary base stays for its dumps; otherwise it goes.
keep=
cleanup() {
  rm -f "$bin" "$report"
  [[ -n "${REPORT_DIR:-}" || -n "$keep" ]] || rm -rf "$base"
}
trap cleanup EXIT
# The suite runs in the background and is waited for, so a signal is handled at once (bash runs a trap
# only after the foreground command ends): the trap passes SIGTERM on to the suite, which stops its
# envtest and removes its directories, and waits for it.
child=
interrupted() {
  [[ -z "$child" ]] || { kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; }
  echo "make flake: interrupted; the runs under $base are removed" >&2
  exit "$1"
}
trap 'interrupted 130' INT
trap 'interrupted 143' TERM

filters=()
[[ -z "${FOCUS:-}" ]] || filters+=("-ginkgo.focus=$FOCUS")
[[ -z "${LABELS:-}" ]] || filters+=("-ginkgo.label-filter=$LABELS")
# A filter that selects nothing must not pass N times.
((${#filters[@]} == 0)) || filters+=(-ginkgo.fail-on-empty)
what="the scenario suite"
[[ -z "${FOCUS:-}${LABELS:-}" ]] || what="the specs of ${FOCUS:+FOCUS='$FOCUS'}${FOCUS:+${LABELS:+ and }}${LABELS:+LABELS='$LABELS'}"

echo "compiling the scenario suite..."
go build -o "$report" ./tools/ginkgoreport || die "tools/ginkgoreport does not compile (above)"
go test -c -o "$bin" ./scenarios/ || die "the scenario suite does not compile (above)"
echo "running $what $N times; runs under $base"

# specs N prints "1 spec" or "N specs".
specs() { if [[ $1 == 1 ]]; then echo "1 spec"; else echo "$1 specs"; fi; }

total=$SECONDS
for ((i = 1; i <= N; i++)); do
  run="$base/run-$i"
  mkdir -p "$run"
  start=$SECONDS
  set +e
  # shellcheck disable=SC2086 # GINKGO_FLAGS is a list of flags
  (cd scenarios && ENSEMBLE_ARTIFACTS="$run/artifacts" KUBEBUILDER_ASSETS="$assets" exec "$bin" -test.v \
    -test.timeout="${SUITE_TIMEOUT:-20m}" -ginkgo.v "${filters[@]}" -ginkgo.json-report="$run/suite.json" \
    ${GINKGO_FLAGS:-}) >"$run/output.log" 2>&1 &
  child=$!
  wait "$child"
  rc=$?
  child=
  set -e
  ran="?"
  [[ ! -s "$run/suite.json" ]] || ran="$("$report" ran "$run/suite.json" 2>/dev/null || echo "?")"
  if ((rc == 0)); then
    echo "run $i/$N: passed in $((SECONDS - start))s ($(specs "$ran"))"
    continue
  fi
  keep=1
  echo "run $i/$N: FAILED in $((SECONDS - start))s ($(specs "$ran") ran; $((i - 1)) of $N runs passed before it)"
  echo
  if [[ -s "$run/suite.json" ]] && "$report" failures -root "$root" "$run/suite.json" | sed 's/^/  /'; then
    :
  else
    echo "  no failed spec in the JSON report; the end of the output:"
    tail -n 30 "$run/output.log" | sed 's/^/    /'
  fi
  [[ "$ran" != 0 ]] || echo "  ($what select no spec: check FOCUS and LABELS)"
  echo
  if [[ -d "$run/artifacts" ]] && [[ -n "$(ls -A "$run/artifacts")" ]]; then
    echo "failure dumps of run $i (ENSEMBLE_ARTIFACTS): $run/artifacts ($(ls -A "$run/artifacts" | wc -l) written)"
  else
    echo "failure dumps of run $i: none written under $run/artifacts (a suite-level failure dumps nothing)"
  fi
  echo "run $i's verbose output: $run/output.log; its JSON report: $run/suite.json"
  exit 1
done

if [[ -n "${REPORT_DIR:-}" ]]; then
  echo "$N/$N passed in $((SECONDS - total))s ($what; reports: $base/run-<i>/suite.json)"
else
  echo "$N/$N passed in $((SECONDS - total))s ($what; the runs under $base are removed: REPORT_DIR=dir keeps them)"
fi
echo
reports=()
for ((i = 1; i <= N; i++)); do reports+=("$base/run-$i/suite.json"); done
"$report" summary "${reports[@]}"
