package mutate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/suite/mutant"
)

// Each way a batch's process ends judges each of its runs: the runs before the one it ended in passed, the
// ones after it were not reached, and that one is judged by how it ended.
func TestJudgeBatch(t *testing.T) {
	const spec = "pool scales"
	it := func(state types.SpecState, attempts, repeat int, msg string) []types.Report {
		sr := types.SpecReport{LeafNodeType: types.NodeTypeIt, ContainerHierarchyTexts: []string{"pool"}, LeafNodeText: "scales",
			State: state, NumAttempts: attempts, MaxMustPassRepeatedly: repeat}
		sr.Failure.Message = msg
		return []types.Report{{SuiteDescription: "s", SpecReports: types.SpecReports{sr}}}
	}
	begins := func(runs ...int) []mutant.Marker {
		var out []mutant.Marker
		for _, r := range runs {
			out = append(out, mutant.Marker{Run: r, Kind: mutant.Begins, Mutant: 10 + r})
		}
		return out
	}
	beforeSuite := it(types.SpecStateSkipped, 0, 3, "")
	beforeSuite[0].SpecReports = append(beforeSuite[0].SpecReports, types.SpecReport{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStateFailed,
		Failure: types.Failure{Message: "boot failed\nmore"}})
	for _, tc := range []struct {
		name string
		n    int
		b    batchRun
		want string // each run's verdict, "-" for not judged, * for a request to run alone again, 1 for one a process
		// detail is part of the judged run's detail.
		detail string
	}{
		{"every run passes", 3, batchRun{reports: it(types.SpecStatePassed, 3, 3, ""), markers: begins(1, 2, 3)}, "passed passed passed", ""},
		{"run 2 fails", 3, batchRun{code: 1, reports: it(types.SpecStateFailed, 2, 3, "Expected 3\nto equal 4"), markers: begins(1, 2)},
			"passed KILLED -", "[FAILED] pool scales: Expected 3"},
		{"the process dies in run 2", 3, batchRun{code: 2, reportErr: errors.New("none"), markers: begins(1, 2),
			output: "ok\npanic: runtime error: index out of range [0] with length 0\n"}, "passed KILLED -", "panic: runtime error: index out of range"},
		{"the process dies before any marker", 3, batchRun{code: 2, reportErr: errors.New("none")}, "KILLED - -", "exited 2 without a report"},
		{"run 2 runs past its limit", 3, batchRun{code: 1, timedOut: 2, reports: it(types.SpecStateInterrupted, 2, 3, "interrupted"), markers: begins(1, 2)},
			"passed TIMED OUT -", "interrupted"},
		// A run that hangs while its managers stop for the next is the one that timed out, though the report
		// names the next.
		{"run 1 hangs stopping", 3, batchRun{code: 1, timedOut: 1, reports: it(types.SpecStateInterrupted, 2, 3, "interrupted"), markers: begins(1)},
			"TIMED OUT - -", ""},
		{"run 2 finds run 1's leftovers", 3, batchRun{code: 1, reports: it(types.SpecStateFailed, 2, 3, "left something behind"),
			markers: append(begins(1), mutant.Marker{Run: 2, Kind: mutant.Unjudged, Why: "Pod/p is still in namespace ns-1"})}, "passed - -", ""},
		{"run 1's managers do not stop", 3, batchRun{code: 1, reports: it(types.SpecStateFailed, 2, 3, "stopping"),
			markers: append(begins(1), mutant.Marker{Run: 1, Kind: mutant.FailedAfter, Why: "stopping manager op: timeout"})},
			"KILLED - -", "[FAILED after its spec] stopping manager op"},
		{"every run passes, the suite fails", 3, batchRun{code: 1, reports: it(types.SpecStatePassed, 3, 3, ""), markers: begins(1, 2, 3)}, "* * *", ""},
		{"the one run passes, the suite fails", 1, batchRun{code: 1, reports: it(types.SpecStatePassed, 1, 0, ""), output: "[FAIL] [AfterSuite] sentinel changed"},
			"KILLED", "sentinel changed"},
		{"the suite runs a spec once", 3, batchRun{reports: it(types.SpecStatePassed, 1, 0, ""), markers: begins(1)}, "passed 1 1", ""},
		{"BeforeSuite fails", 3, batchRun{code: 1, reports: beforeSuite, markers: begins(1)}, "KILLED - -", "boot failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.b.start = time.Unix(100, 0)
			tc.b.end = tc.b.start.Add(time.Duration(len(tc.b.markers)+1) * time.Second)
			for k := range tc.b.markers {
				tc.b.at = append(tc.b.at, tc.b.start.Add(time.Duration(k)*time.Second))
			}
			outs, err := judgeBatch(spec, tc.n, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			detail := ""
			for _, o := range outs {
				v := string(o.verdict)
				switch {
				case o.solo:
					v = "*"
				case o.single:
					v = "1"
				case v == "":
					v = "-"
				}
				got = append(got, v)
				if o.detail != "" {
					detail = o.detail
				}
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("verdicts %q, want %q", g, tc.want)
			}
			if !strings.Contains(detail, tc.detail) {
				t.Errorf("detail %q, want it to hold %q", detail, tc.detail)
			}
		})
	}
	// A report without the spec is the command's error (a focus that selects nothing), never a kill.
	if _, err := judgeBatch(spec, 2, batchRun{reports: []types.Report{{SpecialSuiteFailureReasons: []string{"Found no specs"}}}}); err == nil {
		t.Error("a report without the spec: no error")
	}
	// Each run's time runs from its marker to the next one's.
	outs, _ := judgeBatch(spec, 3, batchRun{reports: it(types.SpecStatePassed, 3, 3, ""), markers: begins(1, 2, 3), start: time.Unix(0, 0),
		at: []time.Time{time.Unix(0, 0), time.Unix(5, 0), time.Unix(7, 0)}, end: time.Unix(10, 0)})
	if got := fmt.Sprint(outs[0].took, outs[1].took, outs[2].took); got != "5s 2s 3s" {
		t.Errorf("run times %s, want 5s 2s 3s", got)
	}
}
