package explore

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// timeline fabricates one case's record from events, one a millisecond apart from t0: "w writer object
// [verb[/subresource]]" a write (update by default), "n ..." the same write changing nothing (a no-op),
// "x system" an operator call to an external system, "k system" none (the record has the system's calls,
// which may be none), "r reader object" a read ("Kind/" for a list), "o
// writer object" another write (the spec's, kube-controller-manager's), "c object" a change of object as
// the event stream saw it. Every manager's watch saw every change.
func timeline(spec string, events ...string) perturb.Record {
	t0 := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	r := perturb.Record{Spec: spec, ReadsRecorded: true, Changes: map[string]int{}, ChangeTimes: map[string][]time.Time{},
		Seen: map[string]map[string]int{}}
	for i, ev := range events {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		f := strings.Fields(ev)
		switch f[0] {
		case "w", "o", "n":
			w := perturb.RecordWrite{Writer: f[1], Object: f[2], Verb: "update", At: at, NoOp: f[0] == "n"}
			if len(f) > 3 {
				w.Verb, w.Subresource, _ = strings.Cut(f[3], "/")
			}
			if f[0] != "o" {
				r.Writes = append(r.Writes, w)
			} else {
				r.Others = append(r.Others, w)
			}
		case "r":
			r.Reads = append(r.Reads, perturb.RecordRead{Reader: f[1], Object: f[2], At: at})
		case "x", "k":
			if r.Calls == nil {
				r.Calls = map[string][]time.Time{}
			}
			if r.Calls[f[1]] == nil {
				r.Calls[f[1]] = []time.Time{}
			}
			if f[0] == "x" {
				r.Calls[f[1]] = append(r.Calls[f[1]], at)
			}
		case "c":
			r.Changes[f[1]]++
			r.ChangeTimes[f[1]] = append(r.ChangeTimes[f[1]], at)
		}
	}
	for _, w := range r.Writes {
		m := managerOf(w.Writer)
		if r.Seen[m] == nil {
			r.Seen[m] = map[string]int{}
		}
		for obj, n := range r.Changes {
			r.Seen[m][obj] = n
		}
	}
	return r
}

// prunedBy runs prune over the enumeration of one spec's two records (modes given) and maps each pruned
// point to its representative.
func prunedBy(t *testing.T, a, b perturb.Record, modes ...perturb.Mode) (map[string]string, int) {
	t.Helper()
	e := enumerate([]perturb.Record{a}, []perturb.Record{b}, modes)
	kept, pruned := prune(e.Points, []perturb.Record{a}, []perturb.Record{b})
	if len(kept)+len(pruned) != len(e.Points) {
		t.Fatalf("prune kept %d and pruned %d of %d points", len(kept), len(pruned), len(e.Points))
	}
	out := map[string]string{}
	for _, p := range pruned {
		out[p.Point] = p.By
		if !slices.ContainsFunc(kept, func(sp SpecPoint) bool { return sp.Point.String() == p.By }) {
			t.Errorf("%s is pruned by %s, which is not kept", p.Point, p.By)
		}
	}
	return out, len(e.Points)
}

func TestPruneKeepsTheFirstOfEachChain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		events    []string
		externals []string
		modes     []perturb.Mode
		want      map[string]string // pruned point: its representative
	}{{
		// The shard controller writes its Shard's status three times; between the first two only it reads
		// the Shard, between the last two the tablegroup controller lists Shards.
		name: "refusals, by what others read",
		events: []string{"r mg/shard Shard/s", "w mg/shard Shard/s update/status", "r mg/shard Shard/s",
			"w mg/shard Shard/s update/status", "r mg/tablegroup Shard/", "w mg/shard Shard/s update/status"},
		modes: []perturb.Mode{perturb.Conflict, perturb.Timeout},
		want: map[string]string{
			"conflict@mg/shard:Shard/s#2": "conflict@mg/shard:Shard/s#1",
			"timeout@mg/shard:Shard/s#2":  "timeout@mg/shard:Shard/s#1",
		},
	}, {
		// The kubelet writes a pod's status twice with another manager reading it between (the stale view
		// is the kubelet's, which read nothing), then the kubelet itself lists pods before its third write:
		// a refusal is told apart by the shard's read, not by the writer's own list.
		name: "held views, by the held manager's reads",
		events: []string{"w dataplane/kubelet Pod/p apply/status", "r mg/shard Pod/p", "w dataplane/kubelet Pod/p apply/status",
			"r dataplane/kubelet Pod/", "w dataplane/kubelet Pod/p apply/status"},
		modes: []perturb.Mode{perturb.Stale, perturb.Conflict},
		want: map[string]string{
			"stale@dataplane/kubelet:Pod/p#2":    "stale@dataplane/kubelet:Pod/p#1",
			"conflict@dataplane/kubelet:Pod/p#3": "conflict@dataplane/kubelet:Pod/p#2",
		},
	}, {
		// The shard controller's first two applies of its Shard changed nothing: refusing either leaves
		// every reader the same Shard, however many read it between (the tablegroup controller does); the
		// third changed it, and refusing it delays that change.
		name:   "refusals of a no-op, whoever read between",
		events: []string{"n mg/shard Shard/s apply", "r mg/tablegroup Shard/", "n mg/shard Shard/s apply", "r mg/tablegroup Shard/", "w mg/shard Shard/s apply"},
		modes:  []perturb.Mode{perturb.Conflict},
		want:   map[string]string{"conflict@mg/shard:Shard/s#2": "conflict@mg/shard:Shard/s#1"},
	}, {
		// The kubelet's first status apply changed nothing, and it lists pods before the next: holding the
		// pod from its manager from either write shows that manager the same pod at every moment.
		name:   "held views from a no-op, whatever the held manager read",
		events: []string{"n dataplane/kubelet Pod/p apply/status", "r dataplane/kubelet Pod/", "w dataplane/kubelet Pod/p apply/status", "c Pod/p", "r dataplane/kubelet Pod/", "w dataplane/kubelet Pod/p apply/status"},
		modes:  []perturb.Mode{perturb.Stale},
		want:   map[string]string{"stale@dataplane/kubelet:Pod/p#2": "stale@dataplane/kubelet:Pod/p#1"},
	}, {
		// A restart after the first status write or the second differs only in what the manager wrote
		// after the first (which the fence refuses to the crashed instance), a Pod apply and the second
		// status write, neither of which changed anything.
		name:   "restarts with nothing changed between",
		events: []string{"w mg/shard Shard/s update/status", "r mg/tablegroup Shard/s", "n mg/shard Pod/p apply", "n mg/shard Shard/s update/status"},
		modes:  []perturb.Mode{perturb.Restart},
		want:   map[string]string{"restart@mg/shard:Shard/s#2": "restart@mg/shard:Shard/s#1"},
	}, {
		// Three writes by two writers with no call to the pooler between them (a read does not matter), then
		// a call, then a fourth write; HAKeeper is never called, so every outage of it is the first one; a
		// third system's fake cannot say when it is called, so its outages all run.
		name: "outages, by the calls between writes",
		events: []string{"k hakeeper", "w mg/shard Shard/s", "w mg/shard Pod/p create", "r mg/shard Pod/p",
			"w dataplane/kubelet Pod/p apply/status", "x pooler", "w mg/shard Shard/s"},
		externals: []string{"pooler", "hakeeper", "unknown"},
		modes:     []perturb.Mode{perturb.Down},
		want: map[string]string{
			"down(pooler)@mg/shard:Pod/p#1":            "down(pooler)@mg/shard:Shard/s#1",
			"down(pooler)@dataplane/kubelet:Pod/p#1":   "down(pooler)@mg/shard:Shard/s#1",
			"down(hakeeper)@mg/shard:Shard/s#2":        "down(hakeeper)@mg/shard:Shard/s#1",
			"down(hakeeper)@mg/shard:Pod/p#1":          "down(hakeeper)@mg/shard:Shard/s#1",
			"down(hakeeper)@dataplane/kubelet:Pod/p#1": "down(hakeeper)@mg/shard:Shard/s#1",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := timeline("s", tc.events...)
			rec.Externals = tc.externals
			if got, _ := prunedBy(t, rec, rec, tc.modes...); !mapsEqual(got, tc.want) {
				t.Errorf("pruned %v; want %v", got, tc.want)
			}
		})
	}
}

func TestPruneKeepsWhatTheRecordsCannotClear(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a, b   perturb.Record
		modes  []perturb.Mode
		expect int // pruned points
	}{
		{"another writer wrote the object between", timeline("s", "w mg/shard Shard/s", "w mg/tablegroup Shard/s patch", "w mg/shard Shard/s"),
			timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s"), []perturb.Mode{perturb.Conflict}, 0},
		{"the spec wrote the object between", timeline("s", "w mg/shard Shard/s", "o case/spec Shard/s", "w mg/shard Shard/s"),
			timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s"), []perturb.Mode{perturb.Conflict}, 0},
		{"the writes differ in shape", timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s update/status"),
			timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s update/status"), []perturb.Mode{perturb.Conflict}, 0},
		{"the second run saw a read between", timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s"),
			timeline("s", "w mg/shard Shard/s", "r kcm Shard/s", "w mg/shard Shard/s"), []perturb.Mode{perturb.Conflict}, 0},
		{"records without reads", func() perturb.Record {
			r := timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s")
			r.ReadsRecorded = false
			return r
		}(), timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s"), []perturb.Mode{perturb.Conflict}, 0},
		{"another object of the held kind changed between (a hold may reach the kind's whole stream)",
			timeline("s", "n dataplane/kubelet Pod/p apply/status", "c Pod/q", "r dataplane/kubelet Pod/q", "n dataplane/kubelet Pod/p apply/status"),
			timeline("s", "n dataplane/kubelet Pod/p apply/status", "n dataplane/kubelet Pod/p apply/status"), []perturb.Mode{perturb.Stale}, 0},
		{"nothing between, both runs", timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s"),
			timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s"), []perturb.Mode{perturb.Conflict}, 1},
		{"the restarted manager wrote another object between", timeline("s", "w mg/shard Shard/s", "w mg/shard Pod/p", "w mg/shard Shard/s"),
			timeline("s", "w mg/shard Shard/s", "w mg/shard Pod/p", "w mg/shard Shard/s"), []perturb.Mode{perturb.Restart}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := prunedBy(t, tc.a, tc.b, tc.modes...)
			if len(got) != tc.expect {
				t.Errorf("pruned %v; want %d", got, tc.expect)
			}
		})
	}
}

func TestPruneChangeTriggersByTheManagersReads(t *testing.T) {
	// The Shard changes four times; mg reads it only after the third change (which a stale view is told
	// apart by, and a restart is not: the read goes with the crashed instance); mg also changed a Pod
	// between the first two (which a restart is told apart by).
	rec := timeline("s",
		"w mg/shard Shard/s",
		"c Shard/s",
		"w mg/shard Pod/p",
		"c Shard/s",
		"c Shard/s",
		"r mg/shard Shard/s",
		"c Shard/s",
	)
	got, _ := prunedBy(t, rec, rec, perturb.Restart, perturb.Stale)
	for _, p := range []string{"stale@mg:Shard/s^2", "stale@mg:Shard/s^3", "restart@mg:Shard/s^3", "restart@mg:Shard/s^4"} {
		if _, ok := got[p]; !ok {
			t.Errorf("%s not pruned; pruned %v", p, got)
		}
	}
	for _, p := range []string{"stale@mg:Shard/s^4", "restart@mg:Shard/s^2"} {
		if by, ok := got[p]; ok {
			t.Errorf("%s pruned by %s: the manager acted between", p, by)
		}
	}
	if got["stale@mg:Shard/s^3"] != "stale@mg:Shard/s^1" || got["restart@mg:Shard/s^4"] != "restart@mg:Shard/s^2" {
		t.Errorf("representatives %v", got)
	}
}

func TestChoosePointsReportsThePruning(t *testing.T) {
	rec := timeline("s", "w mg/shard Shard/s", "w mg/shard Shard/s", "w mg/shard Shard/s")
	for _, tc := range []struct {
		prune bool
		line  string
		kept  int
	}{
		{true, "enumerated 3 points, pruned 2, kept 1\n", 1},
		{false, "enumerated 3 points, pruned 0, kept 3 (-prune=false)\n", 3},
	} {
		var out bytes.Buffer
		x := Exploration{}
		p := plan{modes: []perturb.Mode{perturb.Conflict}, budget: Budget{Points: 10}, prune: tc.prune}
		todo, _ := choosePoints(p, []perturb.Record{rec}, []perturb.Record{rec}, &x, &out)
		if !strings.Contains(out.String(), tc.line) || len(todo) != tc.kept || x.Enumerated != 3 || x.Existed != tc.kept {
			t.Errorf("prune=%v: %d points to run, x %d/%d, output:\n%s\nwant the line %q", tc.prune, len(todo), x.Enumerated, x.Existed, out.String(), tc.line)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestChoosePointsNamesAFewUnnamedPairsAndKeepsThemAll(t *testing.T) {
	var first, second []string
	for i := range 7 {
		first = append(first, fmt.Sprintf("w mg/shard Pod/p-a%d", i))
		second = append(second, fmt.Sprintf("w mg/shard Pod/p-b%d", i))
	}
	var out bytes.Buffer
	x := Exploration{}
	p := plan{modes: []perturb.Mode{perturb.Conflict}, budget: Budget{Points: 10}, prune: true}
	choosePoints(p, []perturb.Record{timeline("s", first...)}, []perturb.Record{timeline("s", second...)}, &x, &out)
	if len(x.Unnamed) != 7 || !strings.Contains(out.String(), "no point by name for 7 pairs") ||
		!strings.Contains(out.String(), "s: mg/shard on Pod/p-a4; and 2 more (explore.json's Unnamed lists them all)") ||
		strings.Contains(out.String(), "Pod/p-a5") {
		t.Errorf("Unnamed %q, output:\n%s\nwant 7 pairs counted, the first 5 named and the rest in Unnamed", x.Unnamed, out.String())
	}
}
