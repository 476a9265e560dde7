#!/usr/bin/env bash
# bisect.sh finds the first commit at which focused scenario specs fail: `git bisect run` in a throw-away
# `git worktree` (in a temp dir), so the caller's checkout (its HEAD, index and working tree, also its own
# bisect, if one is in progress) is never touched, also on Ctrl-C.
#
# Usage (make bisect sets these from its command line):
#   GOOD=<rev> [BAD=HEAD] FOCUS=<spec regexp> tools/bisect/bisect.sh      run from inside the checkout
#
# Each step compiles the scenario suite at the commit (`go test -c ./scenarios/`; a commit that does not
# compile is skipped, exit 125) and runs only the focused specs (-ginkgo.focus=FOCUS) with a Ginkgo JSON
# report; a commit at which FOCUS selects no spec is skipped too. GOOD and BAD are tested first: BAD must
# fail and GOOD pass, else there is nothing to bisect. The envtest binaries are resolved once, from the
# caller's checkout (tools/envtest/build.sh), and reused at every commit.
#
# Optional environment:
#   REPORT_DIR=dir    keep each step's build log, test log, JSON report and failure dumps under dir/bisect/<hash>/
#   GINKGO_FLAGS      more flags for the suite;  SUITE_TIMEOUT  each step's -test.timeout (default 20m)
#   BISECT_TEST_CMD   a shell command to run at each step instead of the scenario suite (the self-test uses
#                     `go test -run "$FOCUS" ./...`); it sees FOCUS and BISECT_REPORT (a path where it may
#                     write a Ginkgo JSON report). Exit 0 good, 125 skip, anything else bad.
#   BISECT_BUILD_CMD  with BISECT_TEST_CMD, what must succeed for a commit to be tested (default
#                     `go build ./... && go test -count=1 -run '^$' ./...`); a failure skips the commit.
set -euo pipefail

# ---------------------------------------------------------------------------------------------------------
# One bisect step, run by `git bisect run` in the worktree (the script is called as `bisect.sh --step`).
# ---------------------------------------------------------------------------------------------------------
step() {
  local hash subject dir rc start ran
  hash="$(git rev-parse HEAD)"
  subject="$(git log -1 --format=%s HEAD)"
  dir="$_BISECT_STEPS/$hash"
  rm -rf "$dir" && mkdir -p "$dir"
  echo $$ >"$_BISECT_TMP/step.pid"
  start=$SECONDS
  # verdict WORD EXIT [REASON] records and prints this step's verdict and ends the step.
  verdict() {
    echo "$1" >"$dir/verdict"
    printf '  %s  %-7s %4ss  %s%s\n' "${hash:0:12}" "$1" "$((SECONDS - start))" "$subject" "${3:+  ($3)}" >&2
    # Leave the worktree clean for bisect's next checkout, whatever the step wrote into it.
    git reset -q --hard HEAD && git clean -qfdx
    rm -f "$_BISECT_TMP/step.pid"
    exit "$2"
  }
  if [[ -n "${BISECT_TEST_CMD:-}" ]]; then
    if ! bash -c "${BISECT_BUILD_CMD:-go build ./... && go test -count=1 -run '^\$' ./...}" >"$dir/build.log" 2>&1; then
      verdict skip 125 "does not build: $(grep -m1 -E '\.go:[0-9]+' "$dir/build.log" || tail -n1 "$dir/build.log")"
    fi
    set +e
    FOCUS="$FOCUS" BISECT_REPORT="$dir/report.json" bash -c "$BISECT_TEST_CMD" >"$dir/test.log" 2>&1
    rc=$?
    set -e
  else
    if ! go test -c -o "$dir/scenarios.test" ./scenarios/ >"$dir/build.log" 2>&1; then
      verdict skip 125 "does not build: $(grep -m1 -E '\.go:[0-9]+' "$dir/build.log" || tail -n1 "$dir/build.log")"
    fi
    [[ -x "$dir/scenarios.test" ]] || verdict skip 125 "no scenario suite at this commit"
    set +e
    # shellcheck disable=SC2086 # GINKGO_FLAGS is a list of flags
    (cd scenarios && ENSEMBLE_ARTIFACTS="$dir/artifacts" KUBEBUILDER_ASSETS="$_BISECT_ASSETS" \
      "$dir/scenarios.test" -test.v -test.timeout="${SUITE_TIMEOUT:-20m}" -ginkgo.v -ginkgo.focus="$FOCUS" \
      -ginkgo.json-report="$dir/report.json" ${GINKGO_FLAGS:-}) >"$dir/test.log" 2>&1
    rc=$?
    set -e
    rm -f "$dir/scenarios.test"
  fi
  if [[ $rc == 0 && -s "$dir/report.json" ]] && ran="$(reporter ran "$dir/report.json")" && [[ $ran == 0 ]]; then
    verdict skip 125 "FOCUS selects no spec at this commit"
  fi
  case $rc in
    0) verdict good 0 ;;
    125) verdict skip 125 "the test command said skip" ;;
    *) verdict bad 1 "exit $rc" ;;
  esac
}

# reporter runs tools/ginkgoreport, built once (from the caller's checkout) into the temp dir.
reporter() {
  if [[ ! -x "$_BISECT_TMP/ginkgoreport" ]]; then
    (cd "$_BISECT_TOOLS_ROOT" && go build -o "$_BISECT_TMP/ginkgoreport" ./tools/ginkgoreport) >&2 || return 2
  fi
  "$_BISECT_TMP/ginkgoreport" "$@"
}

if [[ "${1:-}" == "--step" ]]; then
  step
fi

# ---------------------------------------------------------------------------------------------------------
# The bisect.
# ---------------------------------------------------------------------------------------------------------
die() {
  echo "make bisect: $*" >&2
  exit 2
}
[[ -n "${GOOD:-}" ]] || die "pass GOOD=<rev>, a commit at which the FOCUS specs pass (and FOCUS=<spec regexp>), e.g. make bisect GOOD=HEAD~20 FOCUS='becomes Healthy'"
[[ -n "${FOCUS:-}" ]] || die "pass FOCUS=<spec regexp>, the spec(s) that fail at BAD (${BAD:-HEAD}) and pass at GOOD=$GOOD, e.g. FOCUS='becomes Healthy'"
command -v git >/dev/null || die "git is not installed"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export _BISECT_TOOLS_ROOT
_BISECT_TOOLS_ROOT="$(cd "$here/../.." && pwd)" # the checkout this script is in: ginkgoreport, envtest
repo="$(git rev-parse --show-toplevel 2>/dev/null)" || die "run it inside a git checkout ($(pwd) is not one)"
BAD="${BAD:-HEAD}"
good="$(git -C "$repo" rev-parse -q --verify "$GOOD^{commit}")" || die "GOOD=$GOOD is not a commit of $repo"
bad="$(git -C "$repo" rev-parse -q --verify "$BAD^{commit}")" || die "BAD=$BAD is not a commit of $repo"
[[ "$good" != "$bad" ]] || die "GOOD=$GOOD and BAD=$BAD are the same commit"
git -C "$repo" merge-base --is-ancestor "$good" "$bad" ||
  die "GOOD=$GOOD (${good:0:12}) is not an ancestor of BAD=$BAD (${bad:0:12}): GOOD must be an older commit of BAD's history"
commits="$(git -C "$repo" rev-list --count "$good..$bad")"

export FOCUS SUITE_TIMEOUT="${SUITE_TIMEOUT:-20m}" _BISECT_ASSETS="" _BISECT_TMP _BISECT_STEPS
if [[ -z "${BISECT_TEST_CMD:-}" ]]; then
  # Once, from the caller's checkout: builds the binaries when they are missing, checks them when present.
  _BISECT_ASSETS="$("$_BISECT_TOOLS_ROOT/tools/envtest/build.sh" | tail -n1)" ||
    die "the envtest binaries are not usable (see above); make envtest-assets builds them"
fi

_BISECT_TMP="$(mktemp -d "${TMPDIR:-/tmp}/ensemble-bisect.XXXXXX")"
wt="$_BISECT_TMP/worktree"
if [[ -n "${REPORT_DIR:-}" ]]; then
  mkdir -p "$REPORT_DIR/bisect"
  _BISECT_STEPS="$(cd "$REPORT_DIR/bisect" && pwd)"
else
  _BISECT_STEPS="$_BISECT_TMP/steps"
fi
git_wt() { git -c core.hooksPath=/dev/null -C "$wt" "$@"; }

# cleanup removes the worktree (and its bisect state, which lives in the worktree's own git dir) and the temp
# dir. After Ctrl-C it first lets the interrupted step finish (Ginkgo stops envtest and writes its report);
# a second Ctrl-C stops the wait, not the cleanup.
cleanup() {
  local rc=$? waited=0 pid
  set +e
  trap - EXIT
  trap 'waited=999' INT TERM
  if pid="$(cat "$_BISECT_TMP/step.pid" 2>/dev/null)"; then
    while kill -0 "$pid" 2>/dev/null && ((waited < 300)); do
      sleep 0.1
      ((waited++))
    done
  fi
  if [[ -e "$wt" ]]; then
    git -C "$repo" worktree remove --force --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"
  fi
  git -C "$repo" worktree prune >/dev/null 2>&1
  rm -rf "$_BISECT_TMP"
  if ((rc == 130)); then
    echo "make bisect: interrupted; the worktree is removed and your checkout is as it was" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cp "${BASH_SOURCE[0]}" "$_BISECT_TMP/bisect.sh" # each step runs this copy, whatever the commits hold
git -c core.hooksPath=/dev/null -C "$repo" worktree add -q --detach "$wt" "$bad" >/dev/null

if [[ -n "${BISECT_TEST_CMD:-}" ]]; then
  each="$BISECT_TEST_CMD"
else
  each="go test -c ./scenarios/ && scenarios.test -ginkgo.focus='$FOCUS'${GINKGO_FLAGS:+ $GINKGO_FLAGS}"
fi
echo "bisecting ${good:0:12} (GOOD=$GOOD) .. ${bad:0:12} (BAD=$BAD): $commits commits, in a worktree at $wt"
echo "each step: $each"
dirty="$(git --no-optional-locks -C "$repo" status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
if ((dirty > 0)); then
  echo "note: your checkout has uncommitted changes to $dirty files; they are not bisected: only commits are, BAD=$BAD is ${bad:0:12} as committed (your files are left as they are)"
fi

# test_at REV runs one step at REV outside git bisect; it returns the step's exit status.
test_at() {
  git_wt checkout -q --detach "$1"
  (cd "$wt" && bash "$_BISECT_TMP/bisect.sh" --step) && return 0 || return $?
}
# failure_of HASH prints the failure recorded by the step at HASH: from its JSON report, else from its log.
# Without REPORT_DIR, a step that wrote failure dumps is moved out of the temp dir first, so that the dump
# paths it prints still exist.
failure_of() {
  local dir="$_BISECT_STEPS/$1" shown="$_BISECT_STEPS/$1" lines
  if [[ -z "${REPORT_DIR:-}" && -n "$(ls -A "$dir/artifacts" 2>/dev/null)" ]]; then
    shown="$(mktemp -d "${TMPDIR:-/tmp}/ensemble-bisect-${1:0:12}.XXXXXX")"
    mv "$dir"/* "$shown"/
  fi
  if [[ -s "$shown/report.json" ]] && reporter failures -root "$wt" "$shown/report.json" | sed "s|$dir|$shown|g; s/^/  /"; then
    :
  elif [[ -s "$shown/test.log" ]]; then
    lines="$(grep -E -A4 '^[[:space:]]*--- FAIL|^panic:|\[FAILED\]|^FAIL|_test\.go:[0-9]+:' "$shown/test.log" | head -n 40)" || true
    if [[ -n "$lines" ]]; then sed 's/^/  /' <<<"$lines"; else tail -n 20 "$shown/test.log" | sed 's/^/  /'; fi
  fi
  if [[ "$shown" != "$dir" ]]; then
    echo "  (this step's build log, test log, JSON report and failure dumps are kept in $shown; REPORT_DIR=dir keeps every step's)"
  elif [[ -n "${REPORT_DIR:-}" ]]; then
    echo "  (its build log, test log, JSON report and failure dumps are in $dir)"
  else
    echo "  (set REPORT_DIR=dir to keep each step's logs, JSON report and failure dumps)"
  fi
}

echo "testing the ends first:"
rc=0
test_at "$bad" || rc=$?
case $rc in
  0)
    if ((dirty > 0)); then
      echo "make bisect: BAD=$BAD (${bad:0:12}) as committed passes FOCUS='$FOCUS', and your checkout has uncommitted changes to $dirty files, which bisect never tests: if they make the spec fail, commit them first (then BAD=HEAD is that commit); else the spec may be flaky (make flake N=10 FOCUS='$FOCUS')" >&2
    else
      echo "make bisect: BAD=$BAD (${bad:0:12}) passes FOCUS='$FOCUS': nothing to bisect (a flaky spec? make flake N=10 FOCUS='$FOCUS' tells)" >&2
    fi
    exit 1
    ;;
  125)
    echo "make bisect: BAD=$BAD (${bad:0:12}) cannot be tested (see the line above): pick a BAD that builds and has the spec" >&2
    exit 1
    ;;
esac
rc=0
test_at "$good" || rc=$?
case $rc in
  0) ;;
  125)
    echo "make bisect: GOOD=$GOOD (${good:0:12}) cannot be tested (see the line above): pick a GOOD that builds and has the spec" >&2
    exit 1
    ;;
  *)
    echo "make bisect: GOOD=$GOOD (${good:0:12}) fails FOCUS='$FOCUS' too: pick an older GOOD. Its failure:" >&2
    failure_of "$good" >&2
    exit 1
    ;;
esac

echo "bisecting:"
log="$_BISECT_TMP/bisect.log"
git_wt bisect start "$bad" "$good" >"$log" 2>&1 || { cat "$log" >&2; die "git bisect start failed"; }
if ! grep -q "is the first bad commit" "$log"; then
  git_wt bisect run bash "$_BISECT_TMP/bisect.sh" --step >>"$log" || true
fi

if grep -q "is the first bad commit" "$log"; then
  first="$(git_wt rev-parse refs/bisect/bad)"
  echo
  echo "first bad commit: $first $(git_wt log -1 --format=%s "$first")"
  git_wt log -1 --format='  author %an <%ae>, %ad' --date=iso "$first"
  git_wt show --stat --format= "$first" | sed 's/^/  /'
  [[ -f "$_BISECT_STEPS/$first/verdict" ]] || test_at "$first" || true
  echo
  echo "FOCUS='$FOCUS' at ${first:0:12}:"
  failure_of "$first"
  exit 0
fi
if grep -q "only 'skip'ped commits left" "$log"; then
  echo
  echo "make bisect: the first bad commit is one of these (the others between could not be tested):"
  sed -n '/could be any of:/,/^We cannot bisect more/p' "$log" | sed '1d;$d' |
    while read -r h; do echo "  $(git_wt log -1 --format='%H %s' "$h")"; done
  exit 1
fi
cat "$log" >&2
die "git bisect run did not name a first bad commit (its log is above)"
