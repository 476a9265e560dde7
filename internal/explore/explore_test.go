package explore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/suite/perturb"
)

func TestParseModes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []perturb.Mode
		wantErr string
	}{
		{defaultModes, perturb.Modes, ""},
		{"all", perturb.Modes, ""},
		{" restart , conflict,restart,", []perturb.Mode{perturb.Restart, perturb.Conflict}, ""},
		{"conflict,crash", nil, `names "crash", which is no mode: use some of conflict,throttle,internal,timeout,restart,stale,coalesce,down,slow, or all`},
		{" , ", nil, "is empty"},
	} {
		got, err := parseModes(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseModes(%q) err = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseModes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Budget
		ok   bool
	}{
		{"40", Budget{Points: 40}, true},
		{" 6 ", Budget{Points: 6}, true},
		{"20m", Budget{Time: 20 * time.Minute}, true},
		{"1h30m", Budget{Time: 90 * time.Minute}, true},
		{"0", Budget{}, true}, // the unperturbed runs only, for shards' -from
		{"-3", Budget{}, false},
		{"0s", Budget{}, false},
		{"forty", Budget{}, false},
		{"", Budget{}, false},
	} {
		got, err := parseBudget(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseBudget(%q) = %+v, %v; want %+v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "neither a positive number of points (40) nor a duration (20m)") {
			t.Errorf("parseBudget(%q) err = %v", tc.in, err)
		}
	}
}

// writes fabricates a record's writes: each "writer object" string once per listing.
func writes(ws ...string) []perturb.RecordWrite {
	var out []perturb.RecordWrite
	for _, w := range ws {
		writer, object, _ := strings.Cut(w, " ")
		out = append(out, perturb.RecordWrite{Writer: writer, Object: object, Verb: "update"})
	}
	return out
}

func strs(sps []SpecPoint) []string {
	var out []string
	for _, sp := range sps {
		out = append(out, sp.Spec+" | "+sp.Point.String())
	}
	return out
}

func TestEnumerate(t *testing.T) {
	records := []perturb.Record{
		{Spec: "z spec", Externals: []string{"pooler"}, Writes: writes(
			"op/shard Shard/s", "case/spec Cluster/c", "kubelet Pod/p", "op/shard Shard/s", "op/shard Pod/p")},
		{Spec: "a spec", Writes: writes("case/spec Cluster/c")},
		// A second case of the same spec: the pair's n is its largest count, the externals are merged.
		{Spec: "z spec", Externals: []string{"hakeeper"}, Writes: writes("op/shard Shard/s", "bad/writer/name Shard/s")},
	}
	e := enumerate(records, nil, []perturb.Mode{perturb.Conflict, perturb.Slow, perturb.Down})
	want := []string{
		"z spec | conflict@op/shard:Shard/s#1",
		"z spec | conflict@op/shard:Shard/s#2",
		"z spec | slow(pooler,200ms)@op/shard:Shard/s#1",
		"z spec | slow(pooler,200ms)@op/shard:Shard/s#2",
		"z spec | slow(hakeeper,200ms)@op/shard:Shard/s#1",
		"z spec | slow(hakeeper,200ms)@op/shard:Shard/s#2",
		"z spec | down(pooler)@op/shard:Shard/s#1",
		"z spec | down(pooler)@op/shard:Shard/s#2",
		"z spec | down(hakeeper)@op/shard:Shard/s#1",
		"z spec | down(hakeeper)@op/shard:Shard/s#2",
		"z spec | conflict@op/shard:Pod/p#1",
		"z spec | slow(pooler,200ms)@op/shard:Pod/p#1",
		"z spec | slow(hakeeper,200ms)@op/shard:Pod/p#1",
		"z spec | down(pooler)@op/shard:Pod/p#1",
		"z spec | down(hakeeper)@op/shard:Pod/p#1",
		"z spec | conflict@kubelet:Pod/p#1",
		"z spec | slow(pooler,200ms)@kubelet:Pod/p#1",
		"z spec | slow(hakeeper,200ms)@kubelet:Pod/p#1",
		"z spec | down(pooler)@kubelet:Pod/p#1",
		"z spec | down(hakeeper)@kubelet:Pod/p#1",
	}
	if got := strs(e.Points); !reflect.DeepEqual(got, want) {
		t.Errorf("points =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !reflect.DeepEqual(e.NoWrites, []string{"a spec"}) {
		t.Errorf("NoWrites = %q", e.NoWrites)
	}
	if !reflect.DeepEqual(e.Unparsable, []string{"z spec: bad/writer/name on Shard/s"}) {
		t.Errorf("Unparsable = %q", e.Unparsable)
	}
	for _, sp := range e.Points {
		if back, err := perturb.Parse(sp.Point.String()); err != nil || back != sp.Point {
			t.Errorf("%s does not read back: %+v, %v", sp.Point, back, err)
		}
	}
	// Without externals, down and slow make no point.
	if e := enumerate(records[1:2], nil, []perturb.Mode{perturb.Down}); len(e.Points) != 0 {
		t.Errorf("points without externals: %q", strs(e.Points))
	}
}

func TestEnumerateOnlyObjectsBothRunsWrote(t *testing.T) {
	first := []perturb.Record{{Spec: "s", Writes: writes("op/c Pod/p-x7k2q", "op/c Pod/p-x7k2q", "op/c Svc/head", "op/c Event/p.18ee8f0b68", "op/c Svc/head", "op/c Pod/")}}
	first[0].Writes[5].Verb = "create" // a create with generateName, refused: no name
	second := []perturb.Record{{Spec: "s", Writes: writes("op/c Pod/p-9wd4t", "op/c Svc/head", "op/c Svc/head", "op/c Event/p.18ee8f0a48")}}
	e := enumerate(first, second, []perturb.Mode{perturb.Conflict})
	// The service's k goes up to the writes both runs made; the generated pod gets no point by name, but
	// both runs' first pod of op/c was one named anew, so it gets points by its place, k up to the smaller
	// count of writes on it (one); the unnamed create is a second pod the other run did not make.
	if got, want := strs(e.Points), []string{"s | conflict@op/c:Svc/head#1", "s | conflict@op/c:Svc/head#2", "s | conflict@op/c:Pod/*1#1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("points = %q, want %q", got, want)
	}
	if r := e.Points[2]; r.Writes != 1 {
		t.Errorf("the point on the pod named anew: Writes %d, want 1", r.Writes)
	}
	// Both runs' fourth write was an Event named anew: records, which get no point.
	if !reflect.DeepEqual(e.Unstable, []string{"s: op/c on Pod/p-x7k2q", "s: op/c on Event/p.18ee8f0b68"}) || !reflect.DeepEqual(e.Unparsable, []string{"s: op/c on Pod/"}) {
		t.Errorf("Unstable = %q, Unparsable = %q", e.Unstable, e.Unparsable)
	}
}

// An object named anew each run gets points by its place among its writer's objects of its kind, which fire
// on the same object's same write in both unperturbed runs however the writer's other writes interleave
// there (cluster-api's MachineSet controller writes its status between its Machine creates in one run and
// not in the other). A count of the writer's writes (#k) fired on another object in each run.
func TestRenamedObjectsArePointedAtByTheirPlace(t *testing.T) {
	first := []perturb.Record{{Spec: "s", Writes: writes(
		"capi/machineset MachineSet/w-x1", "capi/machineset Machine/w-x1-aaaa", "capi/machineset MachineSet/w-x1",
		"capi/machine Machine/w-x1-aaaa", "capi/machineset Machine/w-x1-bbbb", "capi/machineset Machine/w-x1-cccc",
		"capi/machineset MachineSet/w-x1", "capi/machineset Machine/w-x1-bbbb", "capi/machineset Event/w-x1.18ee8f0b68")}}
	second := []perturb.Record{{Spec: "s", Writes: writes(
		"capi/machineset Machine/w-y2-dddd", "capi/machineset MachineSet/w-y2", "capi/machineset Event/w-y2.18ee8f0a48",
		"capi/machineset MachineSet/w-y2", "capi/machineset Machine/w-y2-eeee", "capi/machineset MachineSet/w-y2",
		"capi/machineset Machine/w-y2-ffff", "capi/machineset Machine/w-y2-eeee")}}
	e := enumerate(first, second, []perturb.Mode{perturb.Stale})
	want := []string{
		"s | stale@capi/machineset:MachineSet/*1#1", "s | stale@capi/machineset:MachineSet/*1#2", "s | stale@capi/machineset:MachineSet/*1#3",
		"s | stale@capi/machineset:Machine/*1#1",
		"s | stale@capi/machineset:Machine/*2#1", "s | stale@capi/machineset:Machine/*2#2",
		"s | stale@capi/machineset:Machine/*3#1",
		// capi/machine's write on the first Machine is its first Machine in one run; it wrote none in the other.
	}
	if got := strs(e.Points); !reflect.DeepEqual(got, want) {
		t.Errorf("points =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Replayed on each run's writes, as the harness counts them, every point fires once, on the same
	// object's same write in both runs.
	same := map[string]string{"MachineSet/w-x1": "MachineSet/w-y2", "Machine/w-x1-aaaa": "Machine/w-y2-dddd",
		"Machine/w-x1-bbbb": "Machine/w-y2-eeee", "Machine/w-x1-cccc": "Machine/w-y2-ffff"}
	for _, sp := range e.Points {
		p, err := perturb.Parse(sp.Point.String())
		if err != nil {
			t.Fatal(err)
		}
		a, b := replay(p, first[0]), replay(p, second[0])
		if len(a) != 1 || len(b) != 1 {
			t.Errorf("%s fired on %q in the first run and %q in the second, want once in each", p, a, b)
			continue
		}
		obj, nth, _ := strings.Cut(a[0], " ")
		if b[0] != same[obj]+" "+nth {
			t.Errorf("%s fired on %s in the first run and %s in the second", p, a[0], b[0])
		}
	}
}

// replay counts r's writes as the harness counts them for p (perturb.Point.PlaceOf, Counts, Fires) and
// returns the writes p fires on, each as "Kind/name n" (the writer's n-th write on the object).
func replay(p perturb.Point, r perturb.Record) []string {
	var places perturb.Places
	var out []string
	counted, on := 0, map[string]int{}
	for _, w := range r.Writes {
		kind, name, _ := strings.Cut(w.Object, "/")
		if p.Names(w.Writer) {
			on[w.Object]++
		}
		if !p.Counts(w.Writer, kind, name, p.PlaceOf(&places, w.Writer, w.Verb, kind, name)) {
			continue
		}
		if counted++; p.Fires(counted) {
			out = append(out, fmt.Sprintf("%s %d", w.Object, on[w.Object]))
		}
	}
	return out
}

func TestAddLaggedCopiesStalePointsOnly(t *testing.T) {
	e := Enumeration{Points: []SpecPoint{
		{Spec: "s", Point: perturb.Point{Mode: perturb.Stale, Writer: "op/c", Trigger: perturb.Nth(1)}},
		{Spec: "s", Point: perturb.Point{Mode: perturb.Coalesce, Writer: "op/c", Trigger: perturb.Nth(1)}},
		{Spec: "s", Point: perturb.Point{Mode: perturb.Stale, Writer: "op", Object: "Pod/p", Trigger: perturb.Change(2)}},
	}}
	e.addLagged(0)
	if len(e.Points) != 3 {
		t.Fatalf("-lag 0 added points: %q", strs(e.Points))
	}
	e.addLagged(15 * time.Second)
	want := []string{"s | stale@op/c#1", "s | coalesce@op/c#1", "s | stale@op:Pod/p^2", "s | stale@op/c#1+15s", "s | stale@op:Pod/p^2+15s"}
	if got := strs(e.Points); !reflect.DeepEqual(got, want) {
		t.Errorf("points = %q, want %q", got, want)
	}
	if k := modeKey(e.Points[4].Point); k != "stale^+lag" {
		t.Errorf("modeKey of a lagged change point = %q, want it apart from stale^", k)
	}
}

func TestPreference(t *testing.T) {
	for n, want := range map[int][]int{1: {1}, 2: {1, 2}, 3: {1, 3, 2}, 9: {1, 9, 5, 3, 7, 2, 4, 6, 8}} {
		rank := preference(n)
		got := make([]int, len(rank))
		for k, r := range rank {
			got[r] = k
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("preference(%d) orders %v, want %v", n, got, want)
		}
	}
}

// take is the sampler's first n points (all with n < 0).
func take(points []SpecPoint, n int) []string {
	s := newSampler(points)
	var out []SpecPoint
	for n < 0 || len(out) < n {
		sp, ok := s.next()
		if !ok {
			break
		}
		out = append(out, sp)
	}
	return strs(out)
}

func TestSamplerSpreadsASmallBudget(t *testing.T) {
	records := []perturb.Record{
		{Spec: "one", Writes: writes("a/x K/o", "a/x K/o", "a/x K/o", "a/x K/o", "a/x K/o", "b/y K/o", "c K/q", "c K/q", "c K/q")},
		{Spec: "two", Writes: writes("a/x K/t")},
	}
	modes := []perturb.Mode{perturb.Conflict, perturb.Timeout, perturb.Restart}
	e := enumerate(records, nil, modes)
	if len(e.Points) != (5+1+3+1)*3 {
		t.Fatalf("%d points", len(e.Points))
	}
	// Specs alternate while both have points, and the modes rotate across them, so the first three points
	// cover every mode; within "one" the writers a/x, b/y, c take turns and its first three cover every
	// writer and every mode; a pair's k goes 1, n, middle.
	want := []string{
		"one | conflict@a/x:K/o#1",
		"two | timeout@a/x:K/t#1",
		"one | restart@b/y:K/o#1",
		"two | conflict@a/x:K/t#1",
		"one | timeout@c:K/q#1",
		"two | restart@a/x:K/t#1",
		"one | timeout@a/x:K/o#1",
		"one | conflict@b/y:K/o#1",
		"one | restart@c:K/q#1",
		"one | restart@a/x:K/o#1",
		"one | timeout@b/y:K/o#1",
		"one | conflict@c:K/q#1",
		// b/y has no point left; a/x and c go on with k = n, the mode least used in the spec first.
		"one | conflict@a/x:K/o#5",
		"one | timeout@c:K/q#3",
		"one | restart@a/x:K/o#5",
	}
	if got := take(e.Points, len(want)); !reflect.DeepEqual(got, want) {
		t.Errorf("order =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The whole order hands out every point once.
	all := take(e.Points, -1)
	seen := map[string]bool{}
	for _, p := range all {
		seen[p] = true
	}
	if len(all) != len(e.Points) || len(seen) != len(e.Points) {
		t.Errorf("the whole order has %d points, %d distinct, of %d", len(all), len(seen), len(e.Points))
	}
	// a/x's k on K/o in the order the budget takes them, for one mode.
	var ks []string
	for _, p := range all {
		if strings.HasPrefix(p, "one | conflict@a/x:K/o#") {
			ks = append(ks, strings.TrimPrefix(p, "one | conflict@a/x:K/o"))
		}
	}
	if strings.Join(ks, " ") != "#1 #5 #3 #2 #4" {
		t.Errorf("k order %v", ks)
	}
}

// spec fabricates an It's report.
func spec(container, text string, state types.SpecState, message, captured string) types.SpecReport {
	return types.SpecReport{LeafNodeType: types.NodeTypeIt, ContainerHierarchyTexts: []string{container}, LeafNodeText: text,
		State: state, Failure: types.Failure{Message: message}, CapturedGinkgoWriterOutput: captured}
}

const differential = "oracle differential: the end state differs from the unperturbed run's in 2 fields:\n" +
	"  Shard/s status.phase: Healthy -> Degraded\n  Shard/s status.ready: true -> false"

func TestJudge(t *testing.T) {
	const name = "shard heals"
	fired := []string{"conflict@op#1 at Shard/s (update by op/shard)"}
	passed := []types.Report{{SpecReports: []types.SpecReport{spec("shard", "heals", types.SpecStatePassed, "", "")}}}
	failedWith := func(msg, captured string) []types.Report {
		return []types.Report{{SpecReports: []types.SpecReport{spec("shard", "heals", types.SpecStateFailed, msg, captured)}}}
	}
	for _, tc := range []struct {
		name      string
		records   []perturb.Record
		reports   []types.Report
		reportErr error
		want      Outcome
	}{
		{"a pass", []perturb.Record{{Spec: name, Fired: fired}}, passed, nil,
			Outcome{Verdict: Pass, Fired: fired}},
		{"the differential's first field", []perturb.Record{{Spec: name, Fired: fired, Failed: true,
			Failures: []string{"oracle differential: the end state differs from the unperturbed run's in 2 fields:"}}},
			failedWith("suite: hot loop: none\n"+differential, "suite: failure dump of ns written to /a/dump; timeline /a/b/timeline.html, trace-event JSON (Perfetto) /a/b/timeline.trace.json\n"), nil,
			Outcome{Verdict: Fail, Failure: "oracle differential: the end state differs from the unperturbed run's in 2 fields:",
				Difference: "Shard/s status.phase: Healthy -> Degraded", Differential: "Shard/s status.phase: Healthy -> Degraded", Fired: fired, Timeline: "/a/b/timeline.html",
				Others: []string{"suite: hot loop: none"}}},
		{"the differential's line alone when the report lacks it", []perturb.Record{{Spec: name, Fired: fired, Failed: true,
			Failures: []string{"oracle differential: Shard/s status.phase: Healthy -> Degraded"}}}, passed, nil,
			Outcome{Verdict: Fail, Failure: "oracle differential: Shard/s status.phase: Healthy -> Degraded",
				Difference: "Shard/s status.phase: Healthy -> Degraded", Differential: "Shard/s status.phase: Healthy -> Degraded", Fired: fired}},
		{"an assertion: the report's message", []perturb.Record{{Spec: name, Fired: fired, Failed: true}},
			failedWith("Timed out after 30s.\nExpected Healthy", ""), nil,
			Outcome{Verdict: Fail, Failure: "Timed out after 30s.", Difference: "Timed out after 30s.", Fired: fired}},
		{"an oracle of the cleanup: the record's first", []perturb.Record{{Spec: name, Fired: fired, Failed: true,
			Failures: []string{"oracle hot loop: op/shard made 40 passes", "deletion hygiene: 1 object"}}},
			failedWith("oracle hot loop: op/shard made 40 passes\nmore", ""), nil,
			Outcome{Verdict: Fail, Failure: "oracle hot loop: op/shard made 40 passes", Difference: "oracle hot loop: op/shard made 40 passes", Fired: fired,
				Others: []string{"deletion hygiene: 1 object"}}},
		{"a record without SpecFailed (written before it was): the oracle's first", []perturb.Record{{Spec: name, Fired: fired, Failed: true,
			Failures: []string{"oracle differential: the end state differs from the unperturbed run's in 1 fields:"}}},
			[]types.Report{{SpecReports: []types.SpecReport{func() types.SpecReport {
				sr := spec("shard", "heals", types.SpecStateFailed, "the Nodes of the two Machines scaled away\nExpected 3 to be 2", "")
				sr.AdditionalFailures = []types.AdditionalFailure{{State: types.SpecStateFailed, Failure: types.Failure{Message: differential}}}
				return sr
			}()}}}, nil,
			Outcome{Verdict: Fail, Failure: "oracle differential: the end state differs from the unperturbed run's in 1 fields:",
				Difference: "Shard/s status.phase: Healthy -> Degraded", Differential: "Shard/s status.phase: Healthy -> Degraded", Fired: fired,
				Others: []string{"the Nodes of the two Machines scaled away", "oracle differential: the end state differs from the unperturbed run's in 2 fields:"}}},
		{"the spec's own failure leads, the differential's first field kept", []perturb.Record{{Spec: name, Fired: fired, Failed: true, SpecFailed: true,
			Failures: []string{"oracle differential: the spec failed before its end state settled; the end state differs from the unperturbed run's in 2 fields:"}}},
			[]types.Report{{SpecReports: []types.SpecReport{func() types.SpecReport {
				sr := spec("shard", "heals", types.SpecStateFailed, "scaling 1 -> 3 -> 1 makes 3 Machines\nExpected 4 to be 3", "")
				sr.AdditionalFailures = []types.AdditionalFailure{{State: types.SpecStateFailed, Failure: types.Failure{
					Message: strings.Replace(differential, "differential: ", "differential: the spec failed before its end state settled; ", 1)}}}
				return sr
			}()}}}, nil,
			Outcome{Verdict: Fail, Failure: "scaling 1 -> 3 -> 1 makes 3 Machines", Difference: "scaling 1 -> 3 -> 1 makes 3 Machines",
				Differential: "Shard/s status.phase: Healthy -> Degraded", Fired: fired,
				Others: []string{"oracle differential: the spec failed before its end state settled; the end state differs from the unperturbed run's in 2 fields:"}}},
		{"the spec's own failure and no oracle's", []perturb.Record{{Spec: name, Fired: fired, Failed: true, SpecFailed: true}},
			failedWith("scaling 1 -> 3 -> 1 makes 3 Machines\nExpected 4 to be 3", ""), nil,
			Outcome{Verdict: Fail, Failure: "scaling 1 -> 3 -> 1 makes 3 Machines", Difference: "scaling 1 -> 3 -> 1 makes 3 Machines", Fired: fired}},
		{"the spec's own failure and an invariant's", []perturb.Record{{Spec: name, Fired: fired, Failed: true, SpecFailed: true,
			Failures: []string{"invariant \"one MachineSet\" violated: 2 MachineSets at once"}}},
			[]types.Report{{SpecReports: []types.SpecReport{func() types.SpecReport {
				sr := spec("shard", "heals", types.SpecStateFailed, "scaling 1 -> 3 -> 1 makes 3 Machines\nExpected 4 to be 3", "")
				sr.AdditionalFailures = []types.AdditionalFailure{{State: types.SpecStateFailed, Failure: types.Failure{
					Message: "invariant \"one MachineSet\" violated: 2 MachineSets at once\nmore"}}}
				return sr
			}()}}}, nil,
			Outcome{Verdict: Fail, Failure: "scaling 1 -> 3 -> 1 makes 3 Machines", Difference: "scaling 1 -> 3 -> 1 makes 3 Machines", Fired: fired,
				Others: []string{"invariant \"one MachineSet\" violated: 2 MachineSets at once"}}},
		{"never fired", []perturb.Record{{Spec: name}}, passed, nil, Outcome{Verdict: NotReached}},
		{"never fired and failed", []perturb.Record{{Spec: name, Failed: true}}, failedWith("boom", ""), nil,
			Outcome{Verdict: NotReached, Failure: "boom", Difference: "boom"}},
		{"the records of two cases together", []perturb.Record{{Spec: name}, {Spec: "other", Failed: true}, {Spec: name, Fired: fired}}, passed, nil,
			Outcome{Verdict: Pass, Fired: fired}},
		{"a suite-level case's failure is not the spec's", []perturb.Record{{Spec: name, Fired: fired}, {Spec: "", Failed: true, Failures: []string{differential}}},
			[]types.Report{{SpecReports: []types.SpecReport{spec("shard", "heals", types.SpecStatePassed, "", ""),
				{LeafNodeType: types.NodeTypeCleanupAfterSuite, State: types.SpecStateFailed, Failure: types.Failure{Message: differential}},
				{LeafNodeType: types.NodeTypeAfterSuite, State: types.SpecStateFailed, Failure: types.Failure{Message: "sentinel changed\nx"}}}}}, nil,
			Outcome{Verdict: Pass, Fired: fired, Suite: "[DeferCleanup (Suite)] oracle differential: the end state differs from the unperturbed run's in 2 fields:"}},
		{"the spec's failure beside a suite node's", []perturb.Record{{Spec: name, Fired: fired, Failed: true}},
			[]types.Report{{SpecReports: []types.SpecReport{spec("shard", "heals", types.SpecStateFailed, differential, ""),
				{LeafNodeType: types.NodeTypeAfterSuite, State: types.SpecStateFailed, Failure: types.Failure{Message: "sentinel changed\nx"}}}}}, nil,
			Outcome{Verdict: Fail, Failure: "oracle differential: the end state differs from the unperturbed run's in 2 fields:",
				Difference: "Shard/s status.phase: Healthy -> Degraded", Differential: "Shard/s status.phase: Healthy -> Degraded", Fired: fired, Suite: "[AfterSuite] sentinel changed"}},
		{"no record of a passing spec", nil, passed, nil,
			Outcome{Verdict: Error, Failure: "the spec passed but wrote no record (ENSEMBLE_EXPLORE): it makes no suite.Case"}},
		{"no record of a failing spec", nil, failedWith("panic", ""), nil, Outcome{Verdict: Fail, Failure: "panic", Difference: "panic"}},
		{"the spec did not run", nil, []types.Report{{SpecialSuiteFailureReasons: []string{"Found no specs"}}}, nil,
			Outcome{Verdict: Error, Failure: "the spec did not run (no spec of the report has its name): suite: Found no specs", Suite: "suite: Found no specs"}},
		{"a BeforeSuite that failed", nil, []types.Report{{SpecReports: []types.SpecReport{
			{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStateFailed, Failure: types.Failure{Message: "envtest: no etcd"}},
			spec("shard", "heals", types.SpecStateSkipped, "", "")}}}, nil,
			Outcome{Verdict: Error, Failure: "the spec did not run (no spec of the report has its name): [BeforeSuite] envtest: no etcd", Suite: "[BeforeSuite] envtest: no etcd"}},
		{"no report", []perturb.Record{{Spec: name, Fired: fired}}, nil, errors.New("the run wrote no JSON report"),
			Outcome{Verdict: Error, Failure: "the run wrote no JSON report", Difference: "the run wrote no JSON report"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(name, tc.records, tc.reports, tc.reportErr)
			if tc.want.Verdict == Error && tc.want.Difference == "" {
				tc.want.Difference = tc.want.Failure
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("judge =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestTable(t *testing.T) {
	sp := func(spec, point string) SpecPoint {
		p, err := perturb.Parse(point)
		if err != nil {
			t.Fatal(err)
		}
		return SpecPoint{Spec: spec, Point: p}
	}
	rows := []Row{
		combine(sp("shard heals", "conflict@op/shard:Shard/s#1"), []Outcome{{Verdict: Pass}}),
		combine(sp("pool scales", "restart@op/pool:Pod/p#2"), []Outcome{{Verdict: Fail, Difference: "Pod/p status.phase: Running -> Pending " + strings.Repeat("x", 120)}}),
		combine(sp("shard heals", "stale@op/shard:Shard/s#3"), []Outcome{{Verdict: NotReached}, {Verdict: NotReached}}),
		combine(sp("shard heals", "timeout@op/shard:Shard/s#1"), []Outcome{{Verdict: Pass}, {Verdict: Fail, Difference: "d"}, {Verdict: Pass}}),
		combine(sp("shard heals", "restart@op/shard:Shard/s#1"), []Outcome{{Verdict: Pass, Suite: "[AfterSuite] sentinel changed"}}),
	}
	var b bytes.Buffer
	if err := table(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := `spec: shard heals
  point                        mode      verdict                   first difference
  conflict@op/shard:Shard/s#1  conflict  pass                      -
  stale@op/shard:Shard/s#3     stale     not reached (2/2)         -
  timeout@op/shard:Shard/s#1   timeout   differ: pass, fail, pass  d
  restart@op/shard:Shard/s#1   restart   pass                      - (suite, not the spec: [AfterSuite] sentinel changed)

spec: pool scales
  point                    mode     verdict  first difference
  restart@op/pool:Pod/p#2  restart  fail     Pod/p status.phase: Running -> Pending ` + strings.Repeat("x", 110-39-3) + `...
`
	if b.String() != want {
		t.Errorf("table =\n%s\nwant\n%s", b.String(), want)
	}
	if r := rows[3]; r.Agree || r.Verdict != Fail || r.Difference != "d" {
		t.Errorf("disagreeing runs: the row is %+v, want the failing run's", r)
	}
}

func TestSpread(t *testing.T) {
	if got := spread([]time.Duration{3 * time.Second, time.Second, 2 * time.Second}); got != "min 1s, median 2s, max 3s" {
		t.Errorf("spread = %q", got)
	}
	if got := spread([]time.Duration{4 * time.Second, time.Second, 2 * time.Second, 10 * time.Second}); got != "min 1s, median 3s, max 10s" {
		t.Errorf("spread of four = %q", got)
	}
	if got := spread(nil); got != "none" {
		t.Errorf("spread(nil) = %q", got)
	}
}

func TestRerunQuotesASpecForTheShellAndMake(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	const desc = "ensemble scenarios"
	specs := []string{
		"multigres a cluster of one shard becomes Healthy",
		`pins MG-X: the "primary" it's (re)elected [twice] costs $5 + 1.5 * a|b \ ^`,
		"a point's $(shell echo owned) name",
	}
	mk := filepath.Join(t.TempDir(), "Makefile")
	if err := os.WriteFile(mk, []byte("explore:\n\t@printf '%s\\n%s\\n%s\\n' \"$$FOCUS\" \"$$POINTS\" \"$$SUITE\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const point = "slow(pooler,200ms)@multigres/multigres-shard:Shard/mg-db-tg-0#3"
	for _, s := range specs {
		for _, suite := range []string{"./scenarios/", "examples/kuberay"} {
			cmd := rerun(suite, desc, s, point, true)
			focus := specFocus(desc, s)
			re := regexp.MustCompile(focus)
			if !re.MatchString(desc+" "+s) || re.MatchString(desc+" "+s+" too") || re.MatchString("x"+desc+" "+s) {
				t.Errorf("focus %q does not select exactly %q", focus, s)
			}
			if suite == "./scenarios/" && strings.Contains(cmd, "SUITE=") {
				t.Errorf("%s names the default suite", cmd)
			}
			// The shell and make hand the driver the regexp and the point unchanged.
			out, err := exec.Command("bash", "-c", strings.Replace(cmd, "make explore", "make -s -f "+mk+" explore", 1)).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, out)
			}
			wantSuite := ""
			if suite != "./scenarios/" {
				wantSuite = suite
			}
			if want := focus + "\n" + point + "\n" + wantSuite + "\n"; string(out) != want {
				t.Errorf("%s\nreaches make as\n%s\nwant\n%s", cmd, out, want)
			}
		}
	}
	if got := rerun("scenarios", desc, "a b", "conflict@op#1", true); got != `make explore FOCUS='^ensemble scenarios a b$' POINTS='conflict@op#1'` {
		t.Errorf("rerun = %s", got)
	}
	// Without -make the line is the command any module runs, from where it ran: -suite only when not ".".
	if got := rerun(".", desc, "a b", "conflict@op#1", false); got != goRun+` explore -focus '^ensemble scenarios a b$' -points 'conflict@op#1'` {
		t.Errorf("rerun from the suite's directory = %s", got)
	}
	if got := rerun("./e2e/", desc, "it's", "conflict@op#1", false); got != goRun+` explore -suite 'e2e' -focus '^ensemble scenarios it'\''s$' -points 'conflict@op#1'` {
		t.Errorf("rerun of another suite = %s", got)
	}
}

func TestCheckRefusesBadInput(t *testing.T) {
	ok := config{focus: "heals", modes: defaultModes, budget: "40", repeat: 1, jobs: 1, batch: 1, timeout: time.Minute}
	for _, tc := range []struct {
		name string
		edit func(*config)
		want string
	}{
		{"no focus", func(c *config) { c.focus = " " }, "-focus (make's FOCUS) is required"},
		{"a focus that is no regexp", func(c *config) { c.focus = "heals(" }, "is not a regexp"},
		{"a point that does not parse", func(c *config) { c.points = "conflict@op#1 crash@op#2" }, `-points (make's POINTS): perturb: point "crash@op#2": unknown mode`},
		{"a budget that does not parse", func(c *config) { c.budget = "lots" }, "-budget (make's BUDGET)"},
		{"a mode that is none", func(c *config) { c.modes = "conflict,crash" }, "-modes (make's MODES)"},
		{"no repeat", func(c *config) { c.repeat = 0 }, "-repeat (make's REPEAT) is 0"},
		{"no job", func(c *config) { c.jobs = 0 }, "-j (make's EXPLORE_JOBS) is 0"},
		{"negative jobs", func(c *config) { c.jobs = -1 }, "-j (make's EXPLORE_JOBS) is -1"},
		{"a negative repeat", func(c *config) { c.repeat = -2 }, "-repeat (make's REPEAT) is -2"},
		{"a negative budget", func(c *config) { c.budget = "-1" }, `-budget (make's BUDGET) "-1" is neither`},
		{"a negative time budget", func(c *config) { c.budget = "-5m" }, `-budget (make's BUDGET) "-5m" is neither`},
		{"a negative timeout", func(c *config) { c.timeout = -time.Minute }, "-timeout (make's SUITE_TIMEOUT) is -1m0s"},
		{"an -until that is no regexp", func(c *config) { c.until = untilFlags{"ok", "a("} }, `-until (make's UNTIL) "a(" is not a regexp`},
	} {
		c := ok
		tc.edit(&c)
		_, err := check(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err = %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
	if p, err := check(config{focus: "x", modes: "all", budget: "5m", points: "conflict@op#1; restart@op#2", repeat: 1, jobs: 1, batch: 1, timeout: time.Minute}); err != nil ||
		len(p.points) != 2 || p.budget.Time != 5*time.Minute {
		t.Errorf("check = %+v, %v", p, err)
	}
}

func TestEnumerateChangeTriggers(t *testing.T) {
	rec := func(podChanges int) perturb.Record {
		return perturb.Record{Spec: "s", Writes: writes("op/shard Shard/s", "kubelet Pod/p"),
			Changes: map[string]int{"Shard/s": 1, "Pod/p": podChanges, "Pod/gone-abc": 1},
			Seen: map[string]map[string]int{"op": {"Pod/p": podChanges, "Shard/s": 1, "Pod/gone-abc": 1},
				"kubelet": {"Pod/p": 1}}}
	}
	again := rec(3)
	delete(again.Changes, "Pod/gone-abc")
	// A manager with a name of its own in each run (mine-1, mine-2) gets no change point.
	first := rec(2)
	first.Writes = append(first.Writes, writes("mine-1/x Shard/s")...)
	again.Writes = append(again.Writes, writes("mine-2/x Shard/s")...)
	e := enumerate([]perturb.Record{first}, []perturb.Record{again}, []perturb.Mode{perturb.Conflict, perturb.Stale, perturb.Restart})
	var got []string
	for _, s := range strs(e.Points) {
		if strings.Contains(s, "^") {
			got = append(got, s)
		}
	}
	// Pod/p changed twice in one run and 3 times in the other: k = 1, 2 for op; the kubelet's watch began
	// after the pod's first change, so it could deliver one, and it watches no Shard (a change trigger
	// fires in the manager's watch); no conflict point is made on a change; Pod/gone-abc is not in the
	// other run.
	want := []string{
		"s | stale@op:Pod/p^1", "s | stale@op:Pod/p^2", "s | restart@op:Pod/p^1", "s | restart@op:Pod/p^2",
		"s | stale@kubelet:Pod/p^1", "s | restart@kubelet:Pod/p^1",
		"s | stale@op:Shard/s^1", "s | restart@op:Shard/s^1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("change points =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Contains(e.Unstable, "s: the changes of Pod/gone-abc") {
		t.Errorf("Unstable = %q, want the object only one run saw", e.Unstable)
	}
	for _, sp := range e.Points {
		if back, err := perturb.Parse(sp.Point.String()); err != nil || back != sp.Point {
			t.Errorf("%s does not read back: %+v, %v", sp.Point, back, err)
		}
	}
	if modeKey(perturb.Point{Mode: perturb.Stale, Trigger: perturb.Change(1)}) == modeKey(perturb.Point{Mode: perturb.Stale, Trigger: perturb.Nth(1)}) {
		t.Error("the sampler must spread a mode on changes apart from the same mode on writes")
	}
}

func TestFocusedKeepsTheSpecsGinkgoWouldRun(t *testing.T) {
	specs := []string{"pool scales 2 -> 3", "cluster becomes Healthy"}
	for focus, want := range map[string][]string{
		"Healthy":                     {"cluster becomes Healthy"},
		"^fake suite pool":            {"pool scales 2 -> 3"},
		"s":                           specs,
		`^fake suite (pool|cluster) `: specs,
	} {
		if got, err := focused(focus, "fake suite", specs); err != nil || !slices.Equal(got, want) {
			t.Errorf("focused(%q) = %q, %v; want %q", focus, got, err, want)
		}
	}
	if _, err := focused("^pool", "fake suite", specs); err == nil || !strings.Contains(err.Error(), "selects none of them") {
		t.Errorf("a focus that selects none: %v", err)
	}
	if _, err := focused("(", "fake suite", specs); err == nil {
		t.Error("a focus that does not compile: no error")
	}
}

// A budget the sampler spread over two specs (a, b, a, b, ...) still fills each batch with one spec's
// points: one test process boots for up to -batch of them, not for each.
// With a time budget the sampler hands out the specs' points in turn; the batches still hold one spec's
// points each, full, and every point is run once.
func TestTimeBudgetBatchesFillWithOneSpecsPoints(t *testing.T) {
	var points []SpecPoint
	for _, spec := range []string{"a", "b", "c"} {
		for k := 1; k <= 4; k++ {
			points = append(points, SpecPoint{Spec: spec, Point: perturb.Point{Mode: perturb.Conflict, Writer: "op", Trigger: perturb.Nth(k)}})
		}
	}
	b := &batcher{c: config{batch: 4, repeat: 1}, p: plan{budget: Budget{Time: time.Hour}, shard: 1, of: 1}, x: &Exploration{},
		smp: newSampler(points), started: time.Now()}
	seen := map[string]bool{}
	n := 0
	for {
		batch, _, ok := b.next(context.Background())
		if !ok {
			break
		}
		n++
		if len(batch) != 4 {
			t.Errorf("batch %d holds %d runs, want 4", n, len(batch))
		}
		for _, it := range batch {
			if it.sp.Spec != batch[0].sp.Spec {
				t.Errorf("batch %d mixes specs %s and %s", n, batch[0].sp.Spec, it.sp.Spec)
			}
			key := fmt.Sprintf("%s%d", it.sp.Spec, it.sp.Point.Trigger.N)
			if seen[key] {
				t.Errorf("point %s handed out twice", key)
			}
			seen[key] = true
		}
	}
	if n != 3 || len(seen) != 12 {
		t.Errorf("%d batches of %d points, want 3 of all 12", n, len(seen))
	}
}

// twoSpecs is a point budget's todo over specs a and b, three points each, in the sampler's order (a1 b1
// a2 b2 a3 b3), each with its Index.
func twoSpecs() []SpecPoint {
	var todo []SpecPoint
	for k := 1; k <= 3; k++ {
		for _, spec := range []string{"a", "b"} {
			todo = append(todo, SpecPoint{Spec: spec, Point: perturb.Point{Mode: perturb.Conflict, Writer: "op", Trigger: perturb.Nth(k)}})
		}
	}
	return shardOf(todo, 1, 1)
}

func TestBatchesFillWithOneSpecsPoints(t *testing.T) {
	todo := twoSpecs()
	b := &batcher{c: config{batch: 2, repeat: 1}, x: &Exploration{}, todo: bySpec(todo)}
	var got []string
	for {
		batch, _, ok := b.next(context.Background())
		if !ok {
			break
		}
		var line []string
		for _, it := range batch {
			line = append(line, fmt.Sprintf("%s%d@%d", it.sp.Spec, it.sp.Point.Trigger.N, it.sp.Index))
		}
		got = append(got, strings.Join(line, " "))
	}
	want := []string{"a1@0 a2@2", "a3@4", "b1@1 b2@3", "b3@5"}
	if !slices.Equal(got, want) {
		t.Errorf("batches %q, want %q", got, want)
	}
}

// A point budget's batch that ends early (a run failed, so Ginkgo stopped repeating) puts its rest in
// pending, and the next batch takes them and draws again while the next spec's first point waits in
// queued: every point is still handed out once. Counting the draws by rows handed the waiting point out
// once more for each early end and skipped as many points after it (a cluster-api sweep ran
// throttle@fakeinfra/fakecluster:FakeCluster/scale#1 three times).
func TestBatchesThatEndEarlyHandOutEveryPointOnce(t *testing.T) {
	todo := twoSpecs()
	b := &batcher{c: config{batch: 3, repeat: 1}, x: &Exploration{}, todo: bySpec(todo)}
	var got []string
	for {
		batch, _, ok := b.next(context.Background())
		if !ok {
			break
		}
		for _, it := range batch {
			got = append(got, fmt.Sprintf("%s%d", it.sp.Spec, it.sp.Point.Trigger.N))
		}
		// The batch's first run fails: the process reached only it, and the rest go back to pending.
		b.pending = append(b.pending, batch[1:]...)
	}
	want := []string{"a1", "a2", "a3", "a2", "a3", "a3", "b1", "b2", "b3", "b2", "b3", "b3"}
	if !slices.Equal(got, want) {
		t.Errorf("runs handed out %q, want %q (each point once, its pending rest again)", got, want)
	}
	if len(b.x.Rows) != 6 {
		t.Errorf("%d rows, want 6, one a point", len(b.x.Rows))
	}
}

// TestUntilMatchesEveryFailureOfAPoint checks that -until finds a point by any of its failures, not only the one
// its row shows first: a spec's own assertion that an oracle's cleanup failure follows.
func TestUntilMatchesEveryFailureOfAPoint(t *testing.T) {
	rows := []Row{
		{Point: "stale@a#1", Outcome: Outcome{Verdict: Fail, Failure: "oracle hot loop: a made 40 passes"}},
		{Point: "stale@b#5", Outcome: Outcome{Verdict: Fail, Failure: "oracle differential: the end state differs in 1 fields:",
			Difference: "Cluster/c status.replicas: 1 -> 2", Others: []string{"the Nodes of the two Machines scaled away"}}},
		{Point: "stale@c#2", Outcome: Outcome{Verdict: Pass, Others: []string{"Nodes of the two"}}},
		// A spec that failed on its own leads with its failure; the differential's first field still matches.
		{Point: "stale@d#1", Outcome: Outcome{Verdict: Fail, Failure: "makes 3 Machines", Difference: "makes 3 Machines",
			Differential: "Node/<namespace>-* : 3 objects named anew"}},
	}
	got := found([]*regexp.Regexp{regexp.MustCompile("Nodes of the two Machines"), regexp.MustCompile("status.replicas"), regexp.MustCompile("nothing"),
		regexp.MustCompile("objects named anew")}, rows)
	want := []Found{{Until: "Nodes of the two Machines", Point: "stale@b#5", Tried: 2}, {Until: "status.replicas", Point: "stale@b#5", Tried: 2}, {Until: "nothing"},
		{Until: "objects named anew", Point: "stale@d#1", Tried: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("found = %+v, want %+v", got, want)
	}
}
