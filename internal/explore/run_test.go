package explore

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// fakeSuite is a stand-in for a compiled suite: it reads ENSEMBLE_PERTURB and the -ginkgo flags and copies
// the records and reports the test wrote into place, as the harness would write them.
const fakeSuite = `#!/usr/bin/env bash
set -eu
report= focus=
for a in "$@"; do
  case "$a" in
    -ginkgo.json-report=*) report="${a#*=}" ;;
    -ginkgo.focus=*) focus="${a#*=}" ;;
  esac
done
echo "$focus" >>"$FAKE/focuses"
[[ "$ENSEMBLE_PERTURB" == "" || -n "$ENSEMBLE_BASELINE" ]] || { echo "a point without ENSEMBLE_BASELINE" >&2; exit 3; }
case "$focus" in
  nothing) cp "$FAKE/empty.json" "$report"; exit 1 ;;
  broken) cp "$FAKE/broken.json" "$report"; exit 1 ;;
  setup) cp "$FAKE/setup.json" "$report"; exit 1 ;;
esac
# FAKE_SETUP_ONCE plays a BeforeSuite that fails in the first process that runs points.
if [[ -n "${FAKE_SETUP_ONCE:-}" && -n "$ENSEMBLE_PERTURB" && ! -e "$FAKE/setup-failed" ]]; then
  touch "$FAKE/setup-failed"; cp "$FAKE/setup.json" "$report"; exit 1
fi
# ENSEMBLE_PERTURB's runs, separated by |: a run a point, as the harness runs them (suite.Runs), ending at
# the first failing run as Ginkgo's MustPassRepeatedly does. FAKE_ONCE plays a suite that runs a spec once.
IFS='|' read -ra runs <<<"$ENSEMBLE_PERTURB|"
n=${#runs[@]}
[[ -z "${FAKE_ONCE:-}" ]] || n=1
mkdir -p "$ENSEMBLE_EXPLORE" "$ENSEMBLE_ARTIFACTS/pool-scales-ns-1" "$ENSEMBLE_ARTIFACTS/-ns-0"
cp "$FAKE/record-sentinel.json" "$ENSEMBLE_EXPLORE/sentinel.json"
touch "$ENSEMBLE_ARTIFACTS/-ns-0/timeline.html"
echo "$n" >>"$FAKE/runs"
for ((k = 1; k <= n; k++)); do
  case "${runs[k-1]}" in
    "") kind=base ;;
    restart@*) kind=unfired ;;
    # FAKE_BODY makes it a spec that failed its own assertion before the differential oracle failed.
    conflict@op/ctl:Kind/a#2) kind=fail; [[ -z "${FAKE_BODY:-}" ]] || kind=failbody ;;
    # FAKE_FAIL2 makes a second point fail, otherwise; FAKE_FLIP makes it pass in the first process that
    # runs it and fail in the later ones.
    conflict@kubelet:Pod/p#1) kind=pass; [[ -z "${FAKE_FAIL2:-}" ]] || kind=fail2
      if [[ -n "${FAKE_FLIP:-}" ]]; then [[ -e "$FAKE/flipped" ]] && kind=fail2; touch "$FAKE/flipped"; fi ;;
    *) kind=pass ;;
  esac
  sed "s/\"namespace\":\"ns-1\"/\"namespace\":\"ns-1\",\"run\":$k/" "$FAKE/record-$kind.json" >"$ENSEMBLE_EXPLORE/case-$k.json"
  if [[ $kind == fail* ]]; then
    touch "$ENSEMBLE_ARTIFACTS/pool-scales-ns-1/timeline.html"
    sed "s/\"NumAttempts\":1/\"NumAttempts\":$k/; s/\"MaxMustPassRepeatedly\":1/\"MaxMustPassRepeatedly\":$n/" "$FAKE/report-$kind.json" >"$report"
    exit 1
  fi
done
sed "s/\"NumAttempts\":1/\"NumAttempts\":$n/; s/\"MaxMustPassRepeatedly\":1/\"MaxMustPassRepeatedly\":${FAKE_ONCE:-${#runs[@]}}/" "$FAKE/report-pass.json" >"$report"
`

const fakeSpec = `pool "scales" (2 -> 3)`

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fake writes the fake suite and what it copies into a new directory, and returns the suite's path.
func fake(t *testing.T) (dir, bin string) {
	dir = t.TempDir()
	t.Setenv("FAKE", dir)
	bin = filepath.Join(dir, "suite.test")
	if err := os.WriteFile(bin, []byte(fakeSuite), 0o755); err != nil {
		t.Fatal(err)
	}
	base := perturb.Record{Spec: fakeSpec, Namespace: "ns-1",
		Writes:   writes("case/spec Pool/p", "op/ctl Kind/a", "kubelet Pod/p", "op/ctl Kind/a"),
		EndState: map[string]map[string]string{"Kind/a": {"status.phase": "Ready"}}}
	writeJSON(t, filepath.Join(dir, "record-base.json"), base)
	// The case a suite node makes (a sentinel's) has no spec; its writes make no point.
	writeJSON(t, filepath.Join(dir, "record-sentinel.json"), perturb.Record{Spec: "", Namespace: "ns-0", Writes: writes("other Kind/x")})
	unfired := base
	unfired.Points = []string{"restart@..."}
	writeJSON(t, filepath.Join(dir, "record-unfired.json"), unfired)
	pass := unfired
	pass.Fired = []string{"the point at Kind/a (update by op/ctl)"}
	writeJSON(t, filepath.Join(dir, "record-pass.json"), pass)
	failed := pass
	failed.Failed, failed.Failures = true, []string{"oracle differential: the end state differs from the unperturbed run's in 1 fields:"}
	writeJSON(t, filepath.Join(dir, "record-fail.json"), failed)
	failed.Failures = []string{"invariant \"one pod\" violated: 2 pods at once"}
	writeJSON(t, filepath.Join(dir, "record-fail2.json"), failed)
	failed.SpecFailed, failed.Failures = true, []string{"oracle differential: the spec failed before its end state settled; the end state differs from the unperturbed run's in 1 fields:"}
	writeJSON(t, filepath.Join(dir, "record-failbody.json"), failed)
	it := types.SpecReport{LeafNodeType: types.NodeTypeIt, ContainerHierarchyTexts: []string{"pool"}, LeafNodeText: `"scales" (2 -> 3)`, State: types.SpecStatePassed,
		NumAttempts: 1, MaxMustPassRepeatedly: 1}
	writeJSON(t, filepath.Join(dir, "report-pass.json"), []types.Report{{SuiteDescription: "fake suite", SpecReports: []types.SpecReport{it}}})
	bad := it
	bad.State, bad.Failure.Message = types.SpecStateFailed, "oracle differential: the end state differs from the unperturbed run's in 1 fields:\n  Kind/a status.phase: Ready -> Pending"
	writeJSON(t, filepath.Join(dir, "report-fail.json"), []types.Report{{SuiteDescription: "fake suite", SpecReports: []types.SpecReport{bad}}})
	bad2 := bad
	bad2.Failure.Message = "invariant \"one pod\" violated: 2 pods at once"
	writeJSON(t, filepath.Join(dir, "report-fail2.json"), []types.Report{{SuiteDescription: "fake suite", SpecReports: []types.SpecReport{bad2}}})
	body := bad
	body.Failure.Message = "scaling 2 -> 3 makes 3 pods\nExpected 4 to be 3"
	body.AdditionalFailures = []types.AdditionalFailure{{State: types.SpecStateFailed, Failure: types.Failure{Message: "oracle differential: the spec failed before its end state settled; " +
		"the end state differs from the unperturbed run's in 1 fields:\n  Kind/a status.phase: Ready -> Pending"}}}
	writeJSON(t, filepath.Join(dir, "report-failbody.json"), []types.Report{{SuiteDescription: "fake suite", SpecReports: []types.SpecReport{body}}})
	bad.Failure.Message = "Expected Ready\nmore"
	writeJSON(t, filepath.Join(dir, "broken.json"), []types.Report{{SuiteDescription: "fake suite", SpecReports: []types.SpecReport{bad}}})
	setup := types.SpecReport{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStateFailed,
		Failure: types.Failure{Message: "kube-apiserver did not come up within 1m0s\nmore"}}
	writeJSON(t, filepath.Join(dir, "setup.json"), []types.Report{{SuiteDescription: "fake suite", SpecReports: []types.SpecReport{setup}}})
	writeJSON(t, filepath.Join(dir, "empty.json"), []types.Report{{SuiteDescription: "fake suite", SpecialSuiteFailureReasons: []string{"Found no specs"}}})
	return dir, bin
}

func TestRunWithAFakeSuite(t *testing.T) {
	dir, bin := fake(t)
	reports := filepath.Join(dir, "out")
	var out bytes.Buffer
	c := config{suite: dir, bin: bin, focus: "scales", modes: "conflict,restart", budget: "5", repeat: 2, jobs: 2, batch: defaultBatch, reportDir: reports, timeout: time.Minute}
	x, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	// op/ctl wrote Kind/a twice, kubelet Pod/p once: 3 pairs-and-k times 2 modes; the budget takes 5, the
	// failing conflict on op/ctl's second write last.
	if x.Existed != 6 || x.Ran != 5 {
		t.Errorf("existed %d, ran %d; want 6, 5", x.Existed, x.Ran)
	}
	var got []string
	for _, r := range x.Rows {
		got = append(got, r.Point+" "+strings.Join(r.Verdicts, ","))
	}
	want := []string{
		"conflict@op/ctl:Kind/a#1 pass,pass",
		"restart@kubelet:Pod/p#1 not reached,not reached",
		"restart@op/ctl:Kind/a#1 not reached,not reached",
		"conflict@kubelet:Pod/p#1 pass,pass",
		"conflict@op/ctl:Kind/a#2 fail,fail",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows =\n%s\nwant\n%s\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), out.String())
	}
	f := x.Rows[4]
	if f.Difference != "Kind/a status.phase: Ready -> Pending" || !strings.HasSuffix(f.Timeline, "/artifacts/pool-scales-ns-1/timeline.html") || !f.Agree {
		t.Errorf("the failing row: %+v", f)
	}
	wantCmd := goRun + ` explore -suite '` + cleanSuite(dir) + `' -focus '^fake suite pool "scales" \(2 -> 3\)$' -points 'conflict@op/ctl:Kind/a#2'`
	for _, s := range []string{
		"baseline-1: 1 spec passed", "not explored: 1 record of no spec that ran (a suite node's case, such as a sentinel's), namespaces ns-0",
		"6 points over 1 spec (modes conflict,restart); the budget of 5 points runs 5",
		"5 of 6 points ran: 2 pass, 1 fail, 2 not reached, 0 error",
		"determinism: every point had the same verdict in its 2 runs",
		"FAIL conflict@op/ctl:Kind/a#2 on " + `"pool \"scales\" (2 -> 3)"`,
		"  rerun:    " + wantCmd,
		"every row as JSON: " + filepath.Join(reports, "explore.json"),
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the output lacks %q:\n%s", s, out.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(reports, "explore.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Rows []struct{ Point, Verdict, Command string }
	}
	if err := json.Unmarshal(b, &back); err != nil || len(back.Rows) != 5 || back.Rows[4].Command != wantCmd {
		t.Errorf("explore.json: %v, %+v", err, back)
	}
	// Each point ran on its spec alone, its focus anchored to the spec's full text, the 10 runs (5 points, 2
	// runs each) in one process up to the first failing run, the one after it in a second.
	anchored := func() int {
		focuses, _ := os.ReadFile(filepath.Join(dir, "focuses"))
		return strings.Count(string(focuses), `^fake suite pool "scales" \(2 -> 3\)$`+"\n")
	}
	if n := anchored(); n != 2 {
		t.Errorf("%d processes ran the points, want 2 (9 runs up to the failing one, then the last)", n)
	}
	// -batch 1 runs each point in a process of its own.
	out.Reset()
	before := anchored()
	c.batch, c.reportDir = 1, filepath.Join(dir, "out-batch1")
	if x, err = run(context.Background(), c, &out); err != nil || len(x.Rows) != 5 || x.Rows[4].Verdict != Fail {
		t.Errorf("-batch 1: %v, %+v\n%s", err, x.Rows, out.String())
	}
	if n := anchored() - before; n != 10 {
		t.Errorf("-batch 1: %d processes ran the points, want 10 (5 points, 2 runs each)", n)
	}
	c.batch = defaultBatch
	// A suite that runs a spec once however many runs ENSEMBLE_PERTURB asks for is said in one line.
	t.Setenv("FAKE_ONCE", "1")
	out.Reset()
	c.reportDir = filepath.Join(dir, "out-once")
	if _, err = run(context.Background(), c, &out); err == nil || !strings.Contains(err.Error(), "hand suite.Runs() to Ginkgo's MustPassRepeatedly") {
		t.Errorf("a suite that runs a spec once: err = %v, want one that says to hand suite.Runs() to Ginkgo", err)
	}
	os.Unsetenv("FAKE_ONCE")

	// -points runs exactly those.
	out.Reset()
	c.points, c.repeat, c.reportDir = "conflict@op/ctl:Kind/a#2", 1, filepath.Join(dir, "out2")
	x, err = run(context.Background(), c, &out)
	if err != nil || len(x.Rows) != 1 || x.Rows[0].Verdict != Fail {
		t.Errorf("-points: %v, %+v\n%s", err, x.Rows, out.String())
	}

	// A process whose suite set-up fails before the spec began gives its points to another, once.
	t.Setenv("FAKE_SETUP_ONCE", "1")
	out.Reset()
	c.reportDir = filepath.Join(dir, "out-setup")
	x, err = run(context.Background(), c, &out)
	if err != nil || len(x.Rows) != 1 || x.Rows[0].Verdict != Fail || !strings.Contains(out.String(), "failed its suite set-up before its spec ran (BeforeSuite: kube-apiserver") {
		t.Errorf("a failed set-up: %v, %+v, want the point judged in a second process\n%s", err, x.Rows, out.String())
	}
	os.Unsetenv("FAKE_SETUP_ONCE")

	// -until stops after the first point that fails as it says: the budget of 6 would run a sixth. A failure
	// it does not match does not stop it.
	out.Reset()
	c.points, c.budget, c.jobs, c.until, c.reportDir = "", "6", 1, untilFlags{"Ready -> Pending"}, filepath.Join(dir, "out-until")
	x, err = run(context.Background(), c, &out)
	if err != nil || len(x.Rows) != 5 || x.Rows[4].Verdict != Fail {
		t.Errorf("-until: %v, %d rows, want 5 ending in the failing one\n%s", err, len(x.Rows), out.String())
	}
	out.Reset()
	c.until, c.reportDir = untilFlags{"another failure"}, filepath.Join(dir, "out-until-other")
	if x, err = run(context.Background(), c, &out); err != nil || len(x.Rows) != 6 {
		t.Errorf("-until another failure: %v, %d rows, want the budget's 6\n%s", err, len(x.Rows), out.String())
	}
	c.jobs, c.until = 2, nil

	// A time budget runs points until it is spent: here the first one only.
	out.Reset()
	c.points, c.budget, c.reportDir = "", "1ns", filepath.Join(dir, "out3")
	if x, err = run(context.Background(), c, &out); err != nil || len(x.Rows) != 1 {
		t.Errorf("a time budget: %v, %d rows\n%s", err, len(x.Rows), out.String())
	}

	// A budget of 0 points runs the unperturbed runs alone, the plan shards take with -from.
	out.Reset()
	c.budget, c.reportDir = "0", filepath.Join(dir, "out4")
	if x, err = run(context.Background(), c, &out); err != nil || len(x.Rows) != 0 || x.Existed != 6 {
		t.Errorf("a budget of 0: %v, %d rows of %d points, want none of 6\n%s", err, len(x.Rows), x.Existed, out.String())
	}
}

// -repeat's runs of a point in processes of their own keep a directory each: the later run's records,
// report and log do not overwrite the earlier's, the row names every run's directory and, as its Dir, that
// of the run whose outcome it shows, and explore.json and a merge of shards keep them.
func TestRepeatsKeepEveryRunsDirectory(t *testing.T) {
	dir, bin := fake(t)
	t.Setenv("FAKE_FLIP", "1")
	reports := filepath.Join(dir, "out")
	c := config{suite: dir, bin: bin, focus: "scales", modes: "conflict", budget: "5", points: "conflict@kubelet:Pod/p#1", repeat: 3, jobs: 1,
		batch: 1, reportDir: reports, timeout: time.Minute}
	var out bytes.Buffer
	x, err := run(context.Background(), c, &out)
	if err != nil || len(x.Rows) != 1 {
		t.Fatalf("run: %v, %d rows, want 1\n%s", err, len(x.Rows), out.String())
	}
	row := x.Rows[0]
	points := filepath.Join(reports, "points")
	first := filepath.Join(points, "001-conflict-kubelet-Pod-p-1")
	want := []string{first, first + "-repeat2", first + "-repeat3"}
	if !reflect.DeepEqual(row.Verdicts, []string{Pass, Fail, Fail}) || !reflect.DeepEqual(row.Dirs, want) || row.Dir != want[1] {
		t.Fatalf("the row: verdicts %v, dirs %q, dir %q; want pass, fail, fail in %q, its dir the second's\n%s", row.Verdicts, row.Dirs, row.Dir, want, out.String())
	}
	entries, err := os.ReadDir(points)
	if err != nil || len(entries) != 3 {
		t.Errorf("%s holds %d directories (%v), want one a run", points, len(entries), err)
	}
	// Each run's own record: the first passed, the later ones failed.
	for k, d := range want {
		recs, err := perturb.ReadRecords(filepath.Join(d, "records"))
		failed := 0
		for _, r := range recs {
			if r.Spec == fakeSpec && r.Failed {
				failed++
			}
		}
		if err != nil || len(recs) != 2 || (failed == 1) != (k > 0) {
			t.Errorf("run %d's records in %s: %d, %d of them failed (%v); want the run's own", k+1, d, len(recs), failed, err)
		}
		if _, err := os.Stat(filepath.Join(d, "suite.json")); err != nil {
			t.Errorf("run %d: %v", k+1, err)
		}
	}
	if !strings.HasPrefix(row.Timeline, want[1]+"/") {
		t.Errorf("the failing run's timeline %q, want one under %s", row.Timeline, want[1])
	}
	if s := "  runs:     " + strings.Join(want, ", "); !strings.Contains(out.String(), s) {
		t.Errorf("the output lacks %q:\n%s", s, out.String())
	}
	var back Exploration
	b, err := os.ReadFile(filepath.Join(reports, "explore.json"))
	if err == nil {
		err = json.Unmarshal(b, &back)
	}
	if err != nil || len(back.Rows) != 1 || !reflect.DeepEqual(back.Rows[0].Dirs, want) || back.Rows[0].Dir != want[1] {
		t.Errorf("explore.json: %v, %+v", err, back.Rows)
	}
	// A merge of shards keeps each row's directories.
	back.Shard = "1/1"
	writeJSON(t, filepath.Join(dir, "shard.json"), back)
	merged, err := mergeShards([]string{filepath.Join(dir, "shard.json")}, filepath.Join(dir, "merged"), io.Discard)
	if err != nil || len(merged.Rows) != 1 || !reflect.DeepEqual(merged.Rows[0].Dirs, want) || merged.Rows[0].Dir != want[1] {
		t.Errorf("merged: %v, %+v", err, merged.Rows)
	}
}

// -until given more than once stops taking points once every regexp has matched a failing point, and says
// for each the first point it matched, how many points it took and when.
func TestUntilStopsOnceEveryRegexpMatched(t *testing.T) {
	dir, bin := fake(t)
	t.Setenv("FAKE_FAIL2", "1")
	// The budget of 6 would run a sixth point; the fourth fails with "2 pods at once", the fifth with
	// "Ready -> Pending".
	c := config{suite: dir, bin: bin, focus: "scales", modes: "conflict,restart", budget: "6", repeat: 1, jobs: 1, batch: defaultBatch, timeout: time.Minute}
	explore := func(name string, until ...string) (Exploration, string) {
		t.Helper()
		var out bytes.Buffer
		var args []string
		for _, u := range until {
			args = append(args, "-until", u)
		}
		// The flag as the command line gives it: repeated.
		fs := flag.NewFlagSet("explore", flag.ContinueOnError)
		c.until = nil
		fs.Var(&c.until, "until", "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		c.reportDir = filepath.Join(dir, name)
		x, err := run(context.Background(), c, &out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out.String())
		}
		return x, out.String()
	}
	x, out := explore("both", "2 pods at once", "Ready -> Pending")
	if len(x.Rows) != 5 || x.Rows[3].Verdict != Fail || x.Rows[4].Verdict != Fail {
		t.Errorf("two -until: %d rows, want 5, the last two failing\n%s", len(x.Rows), out)
	}
	if len(x.Until) != 2 || x.Until[0].Point != "conflict@kubelet:Pod/p#1" || x.Until[0].Tried != 4 ||
		x.Until[1].Point != "conflict@op/ctl:Kind/a#2" || x.Until[1].Tried != 5 ||
		x.Until[0].Elapsed <= 0 || x.Until[1].Elapsed < x.Until[0].Elapsed || x.Until[1].Elapsed != x.Rows[4].Elapsed {
		t.Errorf("two -until: Until = %+v", x.Until)
	}
	for _, s := range []string{`-until "2 pods at once": found at point 4, conflict@kubelet:Pod/p#1, `, `-until "Ready -> Pending": found at point 5, conflict@op/ctl:Kind/a#2, `} {
		if !strings.Contains(out, s) {
			t.Errorf("the output lacks %q:\n%s", s, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "both", "explore.json"))
	var back struct{ Until []Found }
	if err == nil {
		err = json.Unmarshal(b, &back)
	}
	if err != nil || len(back.Until) != 2 || back.Until[1].Tried != 5 {
		t.Errorf("explore.json's Until: %v, %+v", err, back.Until)
	}
	// One of them stops at its point; one that never matches runs the whole budget, and says so.
	if x, out = explore("one", "2 pods at once"); len(x.Rows) != 4 {
		t.Errorf("-until of the fourth point's failure: %d rows, want 4\n%s", len(x.Rows), out)
	}
	x, out = explore("never", "2 pods at once", "no such failure")
	if len(x.Rows) != 6 || len(x.Until) != 2 || x.Until[1].Point != "" || x.Until[1].Tried != 0 ||
		!strings.Contains(out, `-until "no such failure": no point failed as it says`) {
		t.Errorf("-until that never matches: %d rows, Until %+v, want the budget's 6\n%s", len(x.Rows), x.Until, out)
	}
}

// A point whose spec failed its own assertion before the differential oracle failed (which compared an
// end state that never settled) leads its row with the spec's failure; the differential oracle's first
// field stays in the row, explore.json and the report, and -until still matches it.
func TestASpecsOwnFailureLeadsItsRow(t *testing.T) {
	dir, bin := fake(t)
	t.Setenv("FAKE_BODY", "1")
	var out bytes.Buffer
	c := config{suite: dir, bin: bin, focus: "scales", modes: "conflict", budget: "5", points: "conflict@op/ctl:Kind/a#2", repeat: 1, jobs: 1,
		batch: defaultBatch, timeout: time.Minute, until: untilFlags{"Ready -> Pending"}, reportDir: filepath.Join(dir, "out")}
	x, err := run(context.Background(), c, &out)
	if err != nil || len(x.Rows) != 1 {
		t.Fatalf("run: %v, %+v\n%s", err, x.Rows, out.String())
	}
	r := x.Rows[0]
	if r.Verdict != Fail || r.Failure != "scaling 2 -> 3 makes 3 pods" || r.Difference != r.Failure || r.Differential != "Kind/a status.phase: Ready -> Pending" {
		t.Errorf("the row: %+v, want the spec's failure first and the differential's field kept", r)
	}
	if len(x.Until) != 1 || x.Until[0].Point != "conflict@op/ctl:Kind/a#2" {
		t.Errorf("-until of the differential's field: %+v, want it found", x.Until)
	}
	for _, s := range []string{
		"conflict@op/ctl:Kind/a#2  conflict  fail     scaling 2 -> 3 makes 3 pods\n",
		"\n  scaling 2 -> 3 makes 3 pods\n  differential (after the spec failed, its end state unsettled): Kind/a status.phase: Ready -> Pending\n",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the output lacks %q:\n%s", s, out.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "out", "explore.json"))
	var back struct {
		Rows []struct{ Difference, Differential string }
	}
	if err == nil {
		err = json.Unmarshal(b, &back)
	}
	if err != nil || len(back.Rows) != 1 || back.Rows[0].Difference != "scaling 2 -> 3 makes 3 pods" || back.Rows[0].Differential != "Kind/a status.phase: Ready -> Pending" {
		t.Errorf("explore.json: %v, %+v", err, back.Rows)
	}
}

// Two shards run apart and merged make the rows of one whole run with the same budget: the same points in
// the same order, with the same verdicts.
func TestShardsMergeIntoTheWholeRun(t *testing.T) {
	dir, bin := fake(t)
	c := config{suite: dir, bin: bin, focus: "scales", modes: "conflict,restart", budget: "5", repeat: 1, jobs: 1, batch: defaultBatch, timeout: time.Minute}
	rows := func(x Exploration) []string {
		var out []string
		for _, r := range x.Rows {
			out = append(out, fmt.Sprintf("%d %s %s", r.Index, r.Point, r.Verdict))
		}
		return out
	}
	var out bytes.Buffer
	c.reportDir = filepath.Join(dir, "whole")
	whole, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatalf("the whole run: %v\n%s", err, out.String())
	}
	// The shards take the whole run's unperturbed runs (-from), as a sweep's shards take one plan's.
	var files []string
	c.from = filepath.Join(dir, "whole")
	for _, s := range []string{"2/2", "1/2"} {
		out.Reset()
		c.shard, c.reportDir = s, filepath.Join(dir, "shard-"+s[:1])
		x, err := run(context.Background(), c, &out)
		if err != nil || x.Shard != s || len(x.Rows) == 0 || len(x.Rows) >= len(whole.Rows) {
			t.Fatalf("shard %s: %v, %d rows of %d\n%s", s, err, len(x.Rows), len(whole.Rows), out.String())
		}
		files = append(files, filepath.Join(c.reportDir, "explore.json"))
	}
	focuses, _ := os.ReadFile(filepath.Join(dir, "focuses"))
	if n := strings.Count(string(focuses), "scales\n"); n != 2 {
		t.Errorf("%d unperturbed runs, want the whole run's 2 only: the shards take them with -from", n)
	}
	// A plan explores only the specs -focus selects; one it selects none of is refused.
	c.shard, c.focus, c.reportDir = "", "no such spec", filepath.Join(dir, "unfocused")
	if _, err := run(context.Background(), c, io.Discard); err == nil || !strings.Contains(err.Error(), `-focus "no such spec" selects none of them`) {
		t.Errorf("-from with a focus the plan's specs do not match: %v", err)
	}
	c.focus = "scales"
	c.from = filepath.Join(dir, "nowhere")
	if _, err := run(context.Background(), c, io.Discard); err == nil || !strings.Contains(err.Error(), "has no unperturbed run baseline-1") {
		t.Errorf("-from a directory without unperturbed runs: %v", err)
	}
	out.Reset()
	merged, err := mergeShards(files, filepath.Join(dir, "merged"), &out)
	if err != nil {
		t.Fatalf("merge: %v\n%s", err, out.String())
	}
	if got, want := rows(merged), rows(whole); !reflect.DeepEqual(got, want) {
		t.Errorf("merged rows\n%s\nwant the whole run's\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(out.String(), "5 of 6 points ran: 2 pass, 1 fail, 2 not reached, 0 error") {
		t.Errorf("the merge's report:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "merged", "explore.json")); err != nil {
		t.Errorf("the merge wrote no explore.json: %v", err)
	}
	for _, tc := range []struct {
		files []string
		dir   string
		want  string
	}{
		{files[:1], filepath.Join(dir, "m1"), "shard 1/2 is missing"},
		{[]string{files[0], files[0]}, filepath.Join(dir, "m2"), "are both shard 2/2"},
		{[]string{files[0], filepath.Join(dir, "whole", "explore.json")}, filepath.Join(dir, "m3"), "is not a shard's"},
		{files, "", "-merge needs -report-dir"},
		{[]string{filepath.Join(dir, "none.json")}, filepath.Join(dir, "m4"), "is not an explore.json"},
	} {
		if _, err := mergeShards(tc.files, tc.dir, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("merge %q: err = %v, want %q", tc.files, err, tc.want)
		}
	}
}

func TestRunStopsOnABaselineThatCannotServe(t *testing.T) {
	dir, bin := fake(t)
	for focus, want := range map[string]string{
		"nothing": `FOCUS="nothing" selects no spec of`,
		"broken":  "baseline-1, unperturbed, failed, and a spec that fails unperturbed cannot be judged",
		"setup":   "the suite's BeforeSuite failed, so no spec ran: kube-apiserver did not come up within 1m0s (its output: ",
	} {
		var out bytes.Buffer
		_, err := run(context.Background(), config{suite: dir, bin: bin, focus: focus, modes: "conflict", budget: "5", repeat: 1, jobs: 1, batch: defaultBatch,
			reportDir: filepath.Join(dir, focus), timeout: time.Minute}, &out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("FOCUS=%s: err = %v, want %q", focus, err, want)
		}
		if focus == "broken" && (err == nil || !strings.Contains(err.Error(), "FAILED "+fakeSpec+": Expected Ready")) {
			t.Errorf("the baseline's failure is not named: %v", err)
		}
	}
}

// Without -report-dir the runs go to a temporary directory: removed when no point failed, erred or
// disagreed, or when the command was interrupted; kept and named otherwise.
func TestRunRemovesItsTemporaryDirectoryUnlessItFoundSomething(t *testing.T) {
	dir, bin := fake(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	left := func() []string {
		m, _ := filepath.Glob(filepath.Join(tmp, "ensemble-*"))
		return m
	}
	c := config{suite: dir, bin: bin, focus: "scales", modes: "conflict", budget: "5", repeat: 1, jobs: 1, batch: defaultBatch, timeout: time.Minute,
		points: "conflict@op/ctl:Kind/a#1"}
	var out bytes.Buffer
	if x, err := run(context.Background(), c, &out); err != nil || len(x.Rows) != 1 || x.Rows[0].Verdict != Pass {
		t.Fatalf("a passing point: %v, %+v\n%s", err, x.Rows, out.String())
	}
	if l := left(); len(l) != 0 || !strings.Contains(out.String(), "no point failed, erred or disagreed: removed the runs' directory") {
		t.Errorf("after a passing point, left %q\n%s", l, out.String())
	}

	out.Reset()
	c.points = "conflict@op/ctl:Kind/a#2"
	if _, err := run(context.Background(), c, &out); err != nil {
		t.Fatalf("a failing point: %v\n%s", err, out.String())
	}
	if l := left(); len(l) != 1 || !strings.Contains(out.String(), "every row as JSON: "+filepath.Join(l[0], "explore.json")) {
		t.Errorf("after a failing point, left %q\n%s", l, out.String())
	}
	for _, d := range left() {
		_ = os.RemoveAll(d)
	}

	out.Reset()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := run(ctx, c, &out); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("an interrupted run: err = %v", err)
	}
	if l := left(); len(l) != 0 || !strings.Contains(out.String(), "interrupted: removed the runs' directory") {
		t.Errorf("after an interrupt, left %q\n%s", l, out.String())
	}
}
