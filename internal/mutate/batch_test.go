package mutate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/suite/mutant"
)

// Each way a batch's process ends judges each of its cells (a run of a spec under one mutant): each run's
// first failure says it passed (mutant.ErrPassed, failed on purpose), was not run (mutant.ErrDone) or
// killed its mutant; the markers say where a process that hung or died was, which run could not begin for
// the one before, and which failed after its spec.
func TestJudgeBatch(t *testing.T) {
	const a, b = "pool scales", "pool drains"
	ok, done := mutant.ErrPassed.Error(), mutant.ErrDone.Error()
	// tries is spec's report after len(msgs) flake attempts of n, msgs[j] the first failure of run j+1.
	tries := func(spec string, n int, state types.SpecState, msgs ...string) types.SpecReport {
		sr := types.SpecReport{LeafNodeType: types.NodeTypeIt, LeafNodeText: spec, State: state, NumAttempts: len(msgs), MaxFlakeAttempts: n}
		for j, m := range msgs {
			if j == len(msgs)-1 {
				sr.Failure.Message = m
				break
			}
			sr.AdditionalFailures = append(sr.AdditionalFailures, types.AdditionalFailure{Failure: types.Failure{Message: fmt.Sprintf("Failure recorded during attempt %d:\n%s", j+1, m)}})
		}
		return sr
	}
	reports := func(srs ...types.SpecReport) []types.Report {
		return []types.Report{{SuiteDescription: "s", SpecReports: srs}}
	}
	marks := func(ms ...string) []mutant.Marker {
		var out []mutant.Marker
		for _, m := range ms {
			mk, ok := mutant.ParseMarker(`ensemble mutant: run ` + m)
			if !ok {
				t.Fatalf("bad marker %q", m)
			}
			out = append(out, mk)
		}
		return out
	}
	failed := types.SpecStateFailed
	afterSuite := types.SpecReport{LeafNodeType: types.NodeTypeAfterSuite, State: failed, Failure: types.Failure{Message: "the sentinel cluster changed\nmore"}}
	beforeSuite := reports(tries(a, 3, types.SpecStateSkipped),
		types.SpecReport{LeafNodeType: types.NodeTypeBeforeSuite, State: failed, Failure: types.Failure{Message: "boot failed\nmore"}})
	three := batch{specs: []string{a}, mutants: []int{0, 1, 2}}
	grid := batch{specs: []string{a, b}, mutants: []int{0, 1, 2}}
	for _, tc := range []struct {
		name string
		b    batch
		p    process
		// want lists the judged cells as spec-initial, run and verdict (P, K, T), in order; solo or single
		// when the batch asks for its mutants to run again alone.
		want   string
		detail string // part of a killed cell's detail
	}{
		{"every run passes", three, process{reports: reports(tries(a, 3, failed, ok, ok, ok))}, "a1P a2P a3P", ""},
		{"run 2 fails", three, process{reports: reports(tries(a, 3, failed, ok, "Expected 3\nto equal 4", ok))}, "a1P a2K a3P", "[FAILED] pool scales: Expected 3"},
		{"the last run fails", three, process{reports: reports(tries(a, 3, types.SpecStatePanicked, ok, ok, "runtime error"))}, "a1P a2P a3K", "[PANICKED] pool scales: runtime error"},
		{"a grid: a's run 2 fails, b's run 2 does not run", grid, process{reports: reports(tries(a, 3, failed, ok, "Expected", ok), tries(b, 3, failed, ok, done, ok))},
			"a1P a2K a3P b1P b3P", "[FAILED] pool scales"},
		{"the process dies in run 2", three, process{code: 2, reportErr: errors.New("none"),
			markers: marks(`1 of "pool scales" begins (mutant 1)`, `1 of "pool scales" ended: passed`, `2 of "pool scales" begins (mutant 2)`),
			output:  "ok\n••panic: runtime error: index out of range [0] with length 0\n"}, "a1P a2K", "panic: runtime error: index out of range"},
		{"the process dies in b after a's run 2 failed", grid, process{code: 2, reportErr: errors.New("none"),
			markers: marks(`1 of "pool scales" begins (mutant 1)`, `1 of "pool scales" ended: passed`, `2 of "pool scales" begins (mutant 2)`,
				`2 of "pool scales" ended: failed`, `1 of "pool drains" begins (mutant 1)`),
			output: "fatal error: concurrent map writes"}, "a1P a2K b1K", "fatal error: concurrent map writes"},
		{"the process dies booting", three, process{code: 2, reportErr: errors.New("none"), markers: marks(`1 of "" begins (mutant 1)`)}, "a1K", "exited 2 without a report"},
		{"run 2 runs past its limit", three, process{code: 1, timedOut: &cell{a, 2}, reports: reports(tries(a, 3, types.SpecStateInterrupted, ok, "interrupted")),
			markers: marks(`1 of "pool scales" begins (mutant 1)`, `2 of "pool scales" begins (mutant 2)`)}, "a1P a2T", "interrupted"},
		// A run that hangs while its managers stop for the next is the one that timed out, though the report
		// names the next.
		{"run 1 hangs stopping", three, process{code: 1, timedOut: &cell{a, 1}, reports: reports(tries(a, 3, types.SpecStateInterrupted, ok, "interrupted")),
			markers: marks(`1 of "pool scales" begins (mutant 1)`)}, "a1T", ""},
		{"run 2 finds run 1's leftovers", three, process{reports: reports(tries(a, 3, failed, ok, "left something behind", ok)),
			markers: marks(`1 of "pool scales" begins (mutant 1)`, `2 of "pool scales" unjudged: Pod/p is still in namespace ns-1`, `3 of "pool scales" begins (mutant 3)`)},
			"a1P a3P", ""},
		{"run 1's managers do not stop", three, process{reports: reports(tries(a, 3, failed, ok, "stopping", ok)),
			markers: marks(`1 of "pool scales" begins (mutant 1)`, `1 of "pool scales" failed after its spec: stopping manager op: timeout`,
				`2 of "pool scales" begins (mutant 2)`, `3 of "pool scales" begins (mutant 3)`)},
			"a1K a3P", "[FAILED after its spec] stopping manager op"},
		// A signal from outside (a user, a neighbour's pkill) is no verdict: the run it ended runs again.
		{"a signal from outside ends run 2", three, process{code: 1, reports: reports(tries(a, 3, types.SpecStateInterrupted, ok, "Interrupted by User")),
			markers: marks(`1 of "pool scales" begins (mutant 1)`, `2 of "pool scales" begins (mutant 2)`)}, "a1P lost a2", ""},
		{"a signal from outside kills run 2's process", three, process{code: -1, reportErr: errors.New("none"),
			markers: marks(`1 of "pool scales" begins (mutant 1)`, `1 of "pool scales" ended: passed`, `2 of "pool scales" begins (mutant 2)`)}, "a1P lost a2", ""},
		{"every run passes, the AfterSuite fails", three, process{reports: reports(tries(a, 3, failed, ok, ok, ok), afterSuite)}, "solo", ""},
		{"the one run passes, the AfterSuite fails", batch{specs: []string{a}, mutants: []int{0}},
			process{reports: reports(tries(a, 1, failed, ok), afterSuite)}, "a1K", "the sentinel cluster changed"},
		{"the suite runs a spec once", three, process{reports: reports(tries(a, 0, types.SpecStatePassed, ""))}, "a1P single", ""},
		// A BeforeSuite that failed is a kill of run 1's mutant, which the scheduler gives a second process
		// first (setup).
		{"BeforeSuite fails", three, process{reports: beforeSuite}, "a1K setup", "boot failed"},
		{"BeforeSuite hangs", three, process{code: 1, timedOut: &cell{a, 1}, reports: beforeSuite}, "a1T", "boot failed"},
		// A spec that makes no case of the harness never switches mutants: its runs ran under one.
		{"runs without markers", three, process{reports: reports(tries(a, 3, failed, ok, ok, ok)), markers: []mutant.Marker{}}, "solo", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.p.markers == nil {
				// The harness marks each run that began: those the report counts (an empty list: none).
				for _, spec := range tc.b.specs {
					if sr, ok := ginkgoreport.It(tc.p.reports, spec); ok {
						for run := 1; run <= sr.NumAttempts; run++ {
							tc.p.markers = append(tc.p.markers, mutant.Marker{Spec: spec, Run: run, Kind: mutant.Begins, Mutant: run})
						}
					}
				}
			}
			tc.p.start = time.Unix(100, 0)
			tc.p.end = tc.p.start.Add(time.Duration(len(tc.p.markers)+1) * time.Second)
			for k := range tc.p.markers {
				tc.p.at = append(tc.p.at, tc.p.start.Add(time.Duration(k)*time.Second))
			}
			res, err := judgeBatch(tc.b, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			detail := ""
			for _, spec := range tc.b.specs {
				for run := 1; run <= len(tc.b.mutants); run++ {
					o, ok := res.cells[cell{spec, run}]
					if !ok {
						continue
					}
					got = append(got, fmt.Sprintf("%c%d%c", spec[5], run, strings.ToUpper(string(o.verdict))[0]))
					if o.detail != "" {
						detail = o.detail
					}
				}
			}
			got = slices.DeleteFunc(got, func(s string) bool { return s == "" })
			for i, g := range got {
				got[i] = strings.NewReplacer("s", "a", "d", "b").Replace(g[:1]) + g[1:]
			}
			if res.solo {
				got = append(got, "solo")
			}
			if res.lost != nil {
				got = append(got, fmt.Sprintf("lost %c%d", map[string]rune{a: 'a', b: 'b'}[res.lost.spec], res.lost.run))
			}
			if res.single {
				got = append(got, "single")
			}
			if res.setup != "" {
				got = append(got, "setup")
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("cells %q, want %q", g, tc.want)
			}
			if !strings.Contains(detail, tc.detail) {
				t.Errorf("detail %q, want it to hold %q", detail, tc.detail)
			}
		})
	}
	// A report without a spec of the batch is the command's error (a focus that selects nothing), never a kill.
	if _, err := judgeBatch(three, process{reports: []types.Report{{SpecialSuiteFailureReasons: []string{"Found no specs"}}}}); err == nil {
		t.Error("a report without the spec: no error")
	}
	// Each run's time runs from its marker to the next one's, the first's from the process's start.
	res, _ := judgeBatch(three, process{reports: reports(tries(a, 3, failed, ok, ok, ok)), start: time.Unix(0, 0), end: time.Unix(10, 0),
		markers: marks(`1 of "pool scales" begins (mutant 1)`, `2 of "pool scales" begins (mutant 2)`, `3 of "pool scales" begins (mutant 3)`),
		at:      []time.Time{time.Unix(1, 0), time.Unix(5, 0), time.Unix(7, 0)}})
	if got := fmt.Sprint(res.took[cell{a, 1}], res.took[cell{a, 2}], res.took[cell{a, 3}]); got != "5s 2s 3s" {
		t.Errorf("run times %s, want 5s 2s 3s", got)
	}
}

// The scheduler hands out a mutant alone first, then up to batchRuns mutants from the largest group with
// the same specs left and then the next, their specs' union in one process, each spec's runs of the
// mutants it does not cover skipped; with idle processes it splits what waits among them.
func TestSchedulerBatches(t *testing.T) {
	r := &runner{config: config{jobs: 4}, ctx: context.Background(), alone: map[string]time.Duration{"fast": time.Second, "slow": time.Minute}}
	ms := make([]Mutant, 16)
	s := &scheduler{r: r, ms: ms, left: map[int][]string{}, waiting: map[string][]int{}}
	s.cond = sync.NewCond(&s.mu)
	for i := range ms {
		s.left[i] = []string{"fast", "slow"}
		switch {
		case i == 15:
			ms[i].Solo = true
		case i >= 12:
			s.left[i] = []string{"slow"}
		}
		s.enqueue(i)
	}
	// Every batch stays in flight: the idle processes are those of -j not handed one.
	var got []string
	for range 4 {
		b, ok := s.take()
		if !ok {
			break
		}
		got = append(got, fmt.Sprintf("%v%v skip %v", b.specs, b.mutants, b.skip))
	}
	want := []string{
		"[fast slow][15] skip map[]",
		"[fast slow][0 1 2 3 4] skip map[]", // 15 wait, 3 processes idle: 5 each
		"[fast slow][5 6 7 8 9] skip map[]",
		"[fast slow][12 13 14 10 11] skip map[fast:[1 2 3]]", // the larger group first; fast covers none of it
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("batches\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A batch whose BeforeSuite failed before any spec ran waits again whole, without a verdict; the second
// such failure of a batch of those mutants kills its first run's mutant.
func TestSchedulerRetriesAFailedSetUpOnce(t *testing.T) {
	var out strings.Builder
	r := &runner{config: config{jobs: 1}, ctx: context.Background(), out: &out, alone: map[string]time.Duration{"a": time.Second}}
	ms := make([]Mutant, 3)
	s := &scheduler{r: r, ms: ms, left: map[int][]string{}, lost: map[int]int{}, setupRetried: map[int]bool{}, waiting: map[string][]int{}, total: 3}
	s.cond = sync.NewCond(&s.mu)
	for i := range ms {
		s.left[i] = []string{"a"}
		s.enqueue(i)
	}
	failedSetUp := batchResult{cells: map[cell]outcome{{"a", 1}: {Killed, "[FAILED] BeforeSuite: boot failed"}}, setup: "[FAILED] BeforeSuite: boot failed"}
	for try := 1; try <= 2; try++ {
		b, ok := s.take()
		if !ok || len(b.mutants) != 3 {
			t.Fatalf("try %d: batch %v, %t, want the 3 mutants", try, b.mutants, ok)
		}
		s.finish(b, failedSetUp, nil)
	}
	if waiting := s.waiting[specsKey([]string{"a"})]; ms[0].Status != Killed || s.done != 1 || fmt.Sprint(waiting) != "[1 2]" {
		t.Errorf("after two failed set-ups: mutant 0 %q, %d judged, %v waiting; want mutant 0 killed, 1 and 2 waiting", ms[0].Status, s.done, waiting)
	}
	if !strings.Contains(out.String(), "go to another process") {
		t.Errorf("the output does not say the first failure's mutants run again:\n%s", out.String())
	}
}
