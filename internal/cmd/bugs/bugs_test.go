package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// example writes an example module at dir/name whose go.mod requires op at v1.1.0, with a version
// directory holding a go.mod for each of others.
func example(t *testing.T, dir, name string, others ...string) {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(file, s string) {
		if err := os.WriteFile(filepath.Join(d, file), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module x\n\nrequire (\n\texample.com/op v1.1.0\n\texample.com/other v2.0.0 // indirect\n)\n")
	for _, v := range others {
		if err := os.MkdirAll(filepath.Join(d, v), 0o755); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(v, "go.mod"), "module x\n")
	}
}

func TestSuiteDir(t *testing.T) {
	dir := t.TempDir()
	example(t, dir, "op", "v1.0.0")
	op := filepath.Join(dir, "op")
	for v, want := range map[string]string{"v1.1.0": op, "v1.0.0": filepath.Join(op, "v1.0.0")} {
		if got, err := suiteDir(op, v); err != nil || got != want {
			t.Errorf("suiteDir(%s) = %q, %v; want %q", v, got, err, want)
		}
	}
	for _, c := range []struct{ dir, version, want string }{
		{"op", "v0.9.0", "runs no version v0.9.0: its go.mod requires another, and there is no v0.9.0/go.mod (there are: go.mod's, v1.0.0)"},
		{"op", "v1.1", "runs no version v1.1"},
		{"none", "v1.0.0", "no example at"},
	} {
		if _, err := suiteDir(filepath.Join(dir, c.dir), c.version); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("suiteDir(%s, %s) = %v, want %q", c.dir, c.version, err, c.want)
		}
	}
}

const good = `- bug: op#12
  links: [https://example.com/op/issues/12]
  summary: the thing stays Running forever
  example: op
  buggy: v1.0.0
  fixed: v1.1.0
  spec: op a thing runs
  expect: oracle convergence
  foundBy: the convergence oracle
`

func TestReadCatalogNamesWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	example(t, dir, "op", "v1.0.0")
	path := filepath.Join(dir, "bugs.yaml")
	for yaml, want := range map[string]string{
		good + "  extra: 1\n": `unknown field "extra"`,
		"[]":                  "lists no bug",
		strings.Replace(good, "op#12", "op 12", 1):                     "bug is not repository#number",
		strings.Replace(good, "  expect: oracle convergence\n", "", 1): "expect and foundBy are all required",
		strings.Replace(good, "fixed: v1.1.0", "fixed: v1.0.0", 1):     "must be two versions",
		strings.Replace(good, "buggy: v1.0.0", "buggy: v0.1.0", 1):     "runs no version v0.1.0",
		strings.Replace(good, "example: op", "example: nope", 1):       "no example at",
		good + strings.Replace(good, "- bug", "- bug", 1):              "listed twice",
		good + "  explore: {modes: stale}\n":                           "explore needs modes and budget",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readCatalog(path, dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("catalog\n%s\nerr = %v, want %q", yaml, err, want)
		}
	}
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if es, err := readCatalog(path, dir); err != nil || len(es) != 1 || es[0].Bug != "op#12" {
		t.Errorf("a good catalog: %+v, %v", es, err)
	}
}

func TestRunRefusesBadInputBeforeRunningAnything(t *testing.T) {
	dir := t.TempDir()
	example(t, dir, "op", "v1.0.0")
	path := filepath.Join(dir, "bugs.yaml")
	explored := good + strings.Replace(strings.Replace(good, "op#12", "op#13", 1), "  expect:", "  explore: {modes: stale, budget: 10}\n  expect:", 1)
	if err := os.WriteFile(path, []byte(explored), 0o644); err != nil {
		t.Fatal(err)
	}
	c := config{catalog: path, examples: dir, explore: filepath.Join(dir, "no-explore"), timeout: time.Minute, jobs: 1}
	for _, tc := range []struct {
		bugs []string
		want string
	}{
		{[]string{"op#99"}, `-bugs (make's BUGS) names "op#99", which ` + path + ` does not list: name some of op#12, op#13`},
		{[]string{"op#13"}, "the ensemble binary " + c.explore + " is missing"},
	} {
		c.bugs = tc.bugs
		var out bytes.Buffer
		if _, err := run(context.Background(), c, &out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("-bugs %v: err = %v, want %q", tc.bugs, err, tc.want)
		}
	}
	c.bugs, c.timeout = nil, 0
	if _, err := run(context.Background(), c, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "-timeout (make's SUITE_TIMEOUT)") {
		t.Errorf("-timeout 0: %v", err)
	}
}

func TestTable(t *testing.T) {
	var out bytes.Buffer
	rows := []Row{
		{Bug: "op#12", Operator: "op", Buggy: "v1.0.0", Fixed: "v1.1.0", FoundBy: "a stale point", Found: true, Failure: "MachineSet: 1 -> 2",
			Point: "stale@op/c#1+15s", Tried: 7, TimeToFind: Duration(3 * time.Minute), AtFixed: "pass", Command: "make bugs BUGS='op#12'",
			Others: []string{"stale@op/d#5+15s: the Nodes of the two Machines scaled away"}},
		{Bug: "op#13", Operator: "op", Buggy: "v1.0.0", Fixed: "v1.1.0", FoundBy: "the convergence oracle", Failure: "the spec passed",
			TimeToFind: Duration(time.Minute), AtFixed: "not run", Command: "make bugs BUGS='op#13'"},
	}
	if err := table(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"bug   | operator | buggy  | fixed  | found by      | points tried | time to find | verdict at fixed",
		"op#12 | op       | v1.0.0 | v1.1.0 | a stale point | 7            | 3m0s         | pass",
		"op#13 | op       | v1.0.0 | v1.1.0 | NOT FOUND     | -            | 1m0s         | not run",
		"  point:  stale@op/c#1+15s", "  rerun:  make bugs BUGS='op#13'", "  at v1.0.0: the spec passed",
		"  also failed at v1.0.0 (another finding): stale@op/d#5+15s: the Nodes of the two Machines scaled away",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the table lacks %q:\n%s", s, out.String())
		}
	}
}

// TestRowTextHoldsTheDifferential: a row led by the spec's own failure keeps the differential oracle's
// first field apart (explore's Differential), and an entry's expect still matches it.
func TestRowTextHoldsTheDifferential(t *testing.T) {
	var x exploration
	if err := json.Unmarshal([]byte(`{"Rows":[{"Point":"stale@op/d#1","Verdict":"fail","Failure":"makes 3 Machines of MachineSet ms",
		"Difference":"makes 3 Machines of MachineSet ms","Differential":"Node: 3 objects named anew, 2 in the unperturbed runs"}]}`), &x); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("Node: 3 objects named anew")
	if got := lineWith(x.Rows[0].text(), re); got != "Node: 3 objects named anew, 2 in the unperturbed runs" {
		t.Errorf("lineWith(text) = %q, want the differential's first field", got)
	}
}

func TestLineWith(t *testing.T) {
	s := "oracle differential: the end state differs in 3 fields:\ninvariant \"x\" violated: MachineDeployment workers owns 2 MachineSets at once: a, b\n"
	if got := lineWith(s, regexp.MustCompile("MachineSets at once")); got != `invariant "x" violated: MachineDeployment workers owns 2 MachineSets at once: a, b` {
		t.Errorf("lineWith = %q", got)
	}
	if got := lineWith("first\nsecond", regexp.MustCompile("absent")); got != "first" {
		t.Errorf("lineWith without the text = %q, want the first line", got)
	}
}

// fakeEnsemble plays bin/ensemble's explore: it appends its arguments to $FAKE/calls and writes explore.json.
// A sweep (no -points) has four rows, the second failing with "MachineSets at once", the third otherwise,
// the fourth with the differential oracle's line first and "Node: 3 objects named anew" among its other
// failures (a spec's own assertion that an oracle's cleanup failure follows), each row's verdict 10 s after the previous one, and says
// what each -until came to as explore does; -points passes each point given.
const fakeEnsemble = `#!/usr/bin/env bash
set -eu
echo "$*" >>"$FAKE/calls"
dir= points= until=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -report-dir) dir="$2"; shift ;;
    -points) points="$2"; shift ;;
    -until) until+=("$2"); shift ;;
  esac
  shift
done
mkdir -p "$dir"
if [[ -n "$points" ]]; then
  rows=
  for p in $points; do rows="$rows${rows:+,}{\"Point\":\"$p\",\"Verdict\":\"pass\"}"; done
  echo "{\"Rows\":[$rows]}" >"$dir/explore.json"
  exit 0
fi
points=(stale@op/a#1 stale@op/b#1 stale@op/c#1 stale@op/d#1)
verdicts=(pass fail fail fail)
failures=("" "invariant: 2 MachineSets at once" "oracle convergence: still busy" "oracle differential: the end state differs in 2 fields:")
others=("" "" "" "Node: 3 objects named anew")
found=
for u in "${until[@]}"; do
  f="{}"
  for i in 0 1 2 3; do
    if [[ ${verdicts[i]} == fail && ( ${failures[i]} =~ $u || ${others[i]} =~ $u ) ]]; then
      f="{\"Point\":\"${points[i]}\",\"Tried\":$((i + 1)),\"Elapsed\":\"$((10 * (i + 1)))s\"}"
      break
    fi
  done
  found="$found${found:+,}$f"
done
rows=
for i in 0 1 2 3; do
  rows="$rows${rows:+,}{\"Point\":\"${points[i]}\",\"Verdict\":\"${verdicts[i]}\",\"Failure\":\"${failures[i]}\",\"Others\":[${others[i]:+\"${others[i]}\"}]}"
done
echo "{\"Rows\":[$rows],\"Until\":[$found]}" >"$dir/explore.json"
`

// Entries with the same example, buggy version, spec and explore options share one sweep, stopped by an
// -until each; each row reports its own point, points tried and time to find, and the points that found
// them run together at the fixed version.
func TestEntriesThatShareASweepRunItOnce(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FAKE", dir)
	example(t, dir, "op", "v1.0.0")
	bin := filepath.Join(dir, "ensemble")
	if err := os.WriteFile(bin, []byte(fakeEnsemble), 0o755); err != nil {
		t.Fatal(err)
	}
	entry := func(bug, budget, expect string) string {
		return "- bug: " + bug + "\n  links: [https://example.com/op/issues/1]\n  summary: a duplicate\n  example: op\n  buggy: v1.0.0\n  fixed: v1.1.0\n" +
			"  spec: op a thing scales\n  explore: {modes: stale, budget: \"" + budget + "\"}\n  expect: \"" + expect + "\"\n  foundBy: a stale point\n"
	}
	catalog := entry("op#1", "80", "MachineSets at once") + entry("op#2", "40", "MachineSets at once") + entry("op#3", "80", "Node: 3 objects|never")
	path := filepath.Join(dir, "bugs.yaml")
	if err := os.WriteFile(path, []byte(catalog), 0o644); err != nil {
		t.Fatal(err)
	}
	c := config{catalog: path, examples: dir, explore: bin, timeout: time.Minute, jobs: 1, report: filepath.Join(dir, "runs")}
	var out bytes.Buffer
	res, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	b, _ := os.ReadFile(filepath.Join(dir, "calls"))
	var sweeps, fixed []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(l, "-points") {
			fixed = append(fixed, l)
		} else {
			sweeps = append(sweeps, l)
		}
	}
	// op#1 and op#3 share a sweep (op#2's budget differs): two sweeps, the first with both -until.
	if len(sweeps) != 2 || !strings.Contains(sweeps[0], "-until MachineSets at once -until Node: 3 objects|never") || strings.Count(sweeps[1], "-until") != 1 {
		t.Errorf("sweeps at v1.0.0:\n%s\nwant 2, the first with op#1's and op#3's -until", strings.Join(sweeps, "\n"))
	}
	if len(fixed) != 2 || !strings.Contains(fixed[0], "-points stale@op/b#1 stale@op/d#1") {
		t.Errorf("runs at v1.1.0:\n%s\nwant 2, the first with op#1's and op#3's points", strings.Join(fixed, "\n"))
	}
	if len(res.Rows) != 3 || len(res.Wrong) != 0 {
		t.Fatalf("rows %+v, wrong %v", res.Rows, res.Wrong)
	}
	for i, want := range []struct {
		bug, point string
		tried      int
		took       time.Duration
	}{{"op#1", "stale@op/b#1", 2, 20 * time.Second}, {"op#2", "stale@op/b#1", 2, 20 * time.Second}, {"op#3", "stale@op/d#1", 4, 40 * time.Second}} {
		r := res.Rows[i]
		if r.Bug != want.bug || !r.Found || r.Point != want.point || r.Tried != want.tried || time.Duration(r.TimeToFind) != want.took || r.AtFixed != "pass" {
			t.Errorf("row %d: %+v, want %s found by %s at point %d in %s, passing at v1.1.0", i, r, want.bug, want.point, want.tried, want.took)
		}
	}
	// The third point failed as no entry of the sweep expects: another finding. The fourth is op#3's, not
	// another finding of op#1.
	if o := res.Rows[0].Others; len(o) != 1 || o[0] != "stale@op/c#1: oracle convergence: still busy" {
		t.Errorf("op#1's other findings: %q, want the third point's only", o)
	}
	if f := res.Rows[2].Failure; f != "Node: 3 objects named anew" {
		t.Errorf("op#3's row shows %q, want the failure its expect matched", f)
	}
	if !strings.Contains(out.String(), "op#1, op#3: op at v1.0.0") {
		t.Errorf("the output does not name the sweep's entries:\n%s", out.String())
	}
}
