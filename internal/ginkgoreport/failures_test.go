package ginkgoreport

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// spec fabricates an It's report.
func spec(container, text string, state types.SpecState, ms int) types.SpecReport {
	return types.SpecReport{
		ContainerHierarchyTexts: []string{container}, LeafNodeText: text, LeafNodeType: types.NodeTypeIt,
		LeafNodeLocation: types.CodeLocation{FileName: "/repo/scenarios/x_test.go", LineNumber: 10},
		State:            state, RunTime: time.Duration(ms) * time.Millisecond,
	}
}

// writeRun writes one fabricated run's JSON report the way -ginkgo.json-report does (an array of suite
// reports) and returns its path.
func writeRun(t *testing.T, dir string, i int, specs ...types.SpecReport) string {
	t.Helper()
	var total time.Duration
	for _, s := range specs {
		total += s.RunTime
	}
	b, err := json.Marshal([]types.Report{{SuiteDescription: "ensemble scenarios", SuiteSucceeded: true, RunTime: total, SpecReports: specs}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "run-"+string(rune('0'+i)), "suite.json")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSummaryTable(t *testing.T) {
	dir := t.TempDir()
	boot := types.SpecReport{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed, RunTime: 5 * time.Second}
	var runs [][]types.Report
	for i, ms := range [][3]int{{100, 2000, 7}, {300, 1000, 9}, {200, 4000, 8}} {
		p := writeRun(t, dir, i+1, boot,
			spec("harness", "gate refuses", types.SpecStatePassed, ms[0]),
			spec("multigres", "becomes Healthy", types.SpecStatePassed, ms[1]),
			spec("harness", "quiet", types.SpecStatePassed, ms[2]),
			spec("matrixone", "not focused", types.SpecStateSkipped, 0))
		r, err := Read(p)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}

	ts := timings(runs)
	if len(ts) != 4 {
		t.Fatalf("want 4 rows (BeforeSuite and 3 specs that ran, the skipped one left out), got %d: %+v", len(ts), ts)
	}
	want := []struct {
		name             string
		min, median, max time.Duration
	}{
		{"[BeforeSuite]", 5 * time.Second, 5 * time.Second, 5 * time.Second},
		{"multigres becomes Healthy", time.Second, 2 * time.Second, 4 * time.Second},
		{"harness gate refuses", 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond},
		{"harness quiet", 7 * time.Millisecond, 8 * time.Millisecond, 9 * time.Millisecond},
	}
	for i, w := range want {
		got := ts[i]
		if got.name != w.name || len(got.times) != 3 || got.times[0] != w.min || median(got.times) != w.median || got.times[2] != w.max {
			t.Errorf("row %d: got %s %v (median %v), want %s min %v median %v max %v", i, got.name, got.times, median(got.times), w.name, w.min, w.median, w.max)
		}
	}

	var out strings.Builder
	Summary(&out, runs)
	table := out.String()
	t.Logf("\n%s", table)
	for _, line := range []string{
		"runs     min  median     max  spec",
		"   3      1s      2s      4s  multigres becomes Healthy",
		"   3   100ms   200ms   300ms  harness gate refuses",
		"   3  6.309s  7.107s  9.208s  (whole suite run)",
	} {
		if !strings.Contains(table, line+"\n") {
			t.Errorf("table lacks the line %q", line)
		}
	}
	if strings.Contains(table, "not focused") {
		t.Error("a skipped spec has a row")
	}
}

func TestMedianOfAnEvenCount(t *testing.T) {
	if m := median([]time.Duration{1, 2, 4, 10}); m != 3 {
		t.Fatalf("median of 1 2 4 10 = %v, want 3", m)
	}
}

func TestFailuresNameSpecMessageLocationAndDump(t *testing.T) {
	dir := t.TempDir()
	bad := spec("multigres", "becomes Healthy", types.SpecStateFailed, 30000)
	bad.Failure = types.Failure{Message: "Timed out after 30s.\nfailed at /repo/scenarios/multigres_test.go:71 with:\nshard s: Progressing",
		Location:        types.CodeLocation{FileName: "/repo/scenarios/multigres_test.go", LineNumber: 72},
		FailureNodeType: types.NodeTypeIt, FailureNodeLocation: bad.LeafNodeLocation}
	bad.CapturedGinkgoWriterOutput = "suite: failure dump of case-1 written to /tmp/a/multigres-case-1\nobjects: 3\n"
	p := writeRun(t, dir, 1, spec("harness", "quiet", types.SpecStatePassed, 5), bad)
	reports, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(Ran(reports)); n != 2 {
		t.Errorf("ran = %d, want 2", n)
	}
	var out strings.Builder
	if n := Failures(&out, reports, "/repo", 60); n != 1 {
		t.Fatalf("failures printed %d, want 1:\n%s", n, out.String())
	}
	for _, s := range []string{"FAILED multigres becomes Healthy", "failed at scenarios/multigres_test.go:72",
		"    shard s: Progressing", "    failed at scenarios/multigres_test.go:71 with:", "failure dump: /tmp/a/multigres-case-1"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("failures output lacks %q:\n%s", s, out.String())
		}
	}
}
