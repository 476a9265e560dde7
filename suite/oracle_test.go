package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ensembletest/ensemble/internal/recordtb"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

var errConflictForTest = errors.New("the object has been modified")

// podWrites are 16 writes of Pod ns/p, 99 ms apart (1.485 s in all, at least 5 in each 500 ms slice), by
// the operator and the kubelet; uidOf(i) is the uid the i-th write answered with.
func podWrites(t0 time.Time, uidOf func(i int) types.UID) []Write {
	var ws []Write
	for i := range 16 {
		w := Write{Time: t0.Add(time.Duration(i) * 99 * time.Millisecond), Manager: "dataplane", Verb: VerbPatch, Subresource: "status",
			Kind: "Pod", Namespace: "ns", Name: "p", ResourceVersion: strconv.Itoa(100 + i), UID: uidOf(i)}
		if i%4 == 0 {
			w.Manager, w.Controller, w.Subresource = "op", "pool", ""
		}
		ws = append(ws, w)
	}
	return ws
}

// hotLoopsOf feeds ws to a fresh hot-loop oracle and returns its crossings.
func hotLoopsOf(ws []Write) []hotLoop {
	r := newRecorder(newScheme(), newBroadcast(), newScopes())
	for _, w := range ws {
		r.addWrite(w)
	}
	return r.hotLoopsIn("ns", time.Time{})
}

// TestHotLoopJudgesOneIncarnation: the writes that made the thrash spec's false positive (a pod deleted and
// created again under its name, the kubelet writing both incarnations: 16 writes of one name within 1.486 s)
// are two objects' writes, neither a loop; the same writes of one uid are one, and a write that names no uid
// counts against the name's latest incarnation.
func TestHotLoopJudgesOneIncarnation(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	one := podWrites(t0, func(int) types.UID { return "a" })
	if h := hotLoopsOf(one); len(h) != 1 || !strings.Contains(h[0].String(), "oracle hot-loop: Pod/p was written 16 times within 1.485s") {
		t.Fatalf("one incarnation written 16 times in 1.485 s: crossings %v, want one", h)
	}
	// The operator deletes the first incarnation after its 8th write and creates the second.
	recreated := podWrites(t0, func(i int) types.UID {
		if i < 8 {
			return "a"
		}
		return "b"
	})
	for i, v := range map[int]Verb{7: VerbDelete, 8: VerbCreate} {
		recreated[i].Manager, recreated[i].Controller, recreated[i].Subresource, recreated[i].Verb = "op", "pool", "", v
	}
	recreated[7].ResourceVersion = ""
	if h := hotLoopsOf(recreated); len(h) != 0 {
		t.Fatalf("a name deleted and created again, each incarnation written 8 times: crossings %v, want none", h)
	}
	// Rejected writes carry no uid (an apply) or the one the writer's copy had: the first are the latest
	// incarnation's, so one incarnation plus such writes still loops.
	for i := range one {
		if i%3 == 1 {
			one[i].UID, one[i].ResourceVersion, one[i].Err = "", "", errConflictForTest
		}
	}
	if h := hotLoopsOf(one); len(h) != 1 {
		t.Fatalf("one incarnation, some of its writes rejected without a uid: crossings %v, want one", h)
	}
	// A writer's stale copy of the first incarnation (rejected, uid a) does not count against the second.
	stale := podWrites(t0, func(i int) types.UID {
		if i%2 == 0 {
			return "b"
		}
		return "a"
	})
	for i := range stale {
		if stale[i].UID == "a" {
			stale[i].ResourceVersion, stale[i].Err = "", errConflictForTest
		}
	}
	if h := hotLoopsOf(stale); len(h) != 0 {
		t.Fatalf("8 writes of incarnation b and 8 rejected writes of a stale copy of a: crossings %v, want none", h)
	}
}

// TestHotLoopThreshold: one writer's writes every 100 ms (10 writes/s) are flagged once 1.5 s of them are
// recorded, every 110 ms (about 9 writes/s) never, over recorded times rather than a machine's pace.
func TestHotLoopThreshold(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	every := func(d time.Duration, n int) []Write {
		var ws []Write
		for i := range n {
			ws = append(ws, Write{Time: t0.Add(time.Duration(i) * d), Manager: "op", Controller: "c", Verb: VerbPatch,
				Kind: "ConfigMap", Namespace: "ns", Name: "m", ResourceVersion: strconv.Itoa(i + 1), UID: "u"})
		}
		return ws
	}
	h := hotLoopsOf(every(100*time.Millisecond, 100))
	if len(h) != 1 || h[0].At.Sub(t0) > 1500*time.Millisecond || h[0].N < hotLoopPerSlice*hotLoopSlices {
		t.Fatalf("10 writes/s for 10 s: crossings %v, want one within 1.5 s of the first write", h)
	}
	if h := hotLoopsOf(every(110*time.Millisecond, 100)); len(h) != 0 {
		t.Fatalf("about 9 writes/s for 11 s: crossings %v, want none", h)
	}
}

// TestHotLoopTakesWritesOutOfOrder: writes recorded out of their Time order (two writers of one object
// recording at once on a loaded machine, one 700 ms behind) neither panic the oracle, which left the
// recorder locked and hung a spec under -race, nor hide a loop.
func TestHotLoopTakesWritesOutOfOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ws []Write
	for i := range 40 {
		ws = append(ws, Write{Time: t0.Add(time.Duration(i) * 100 * time.Millisecond), Manager: "op", Controller: fmt.Sprint("c", i%2),
			Verb: VerbPatch, Kind: "ConfigMap", Namespace: "ns", Name: "m", ResourceVersion: strconv.Itoa(i + 1), UID: "u"})
	}
	late := ws[10]
	ws = append(slices.Delete(ws, 10, 11), Write{})
	copy(ws[18:], ws[17:])
	ws[17] = late // recorded after the write of 1.8 s, though it was made at 1.0 s
	h := hotLoopsOf(ws)
	if len(h) != 1 {
		t.Fatalf("10 writes/s for 4 s, one of them recorded late: crossings %v, want one", h)
	}
}

// TestEveryOracleIsDocumented: each oracle oracleTable registers has its entry in docs/architecture.md's
// Oracles section, named as a spec writes it, and OptOut's error for an unknown oracle offers it.
func TestEveryOracleIsDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n### Oracles\n")
	section, _, _ = strings.Cut(section, "\n### ")
	p := &recordtb.TB{}
	c := &Case{t: p}
	c.OptOut("no-such-oracle", "a test")
	for _, o := range oracleTable {
		if !strings.Contains(section, "(`suite."+o.ident+"`)") {
			t.Errorf("oracle %s: docs/architecture.md's Oracles section has no entry naming (`suite.%s`)", o.name, o.ident)
		}
		if !strings.Contains(strings.Join(p.Fatals(), "\n"), "suite."+o.ident+" ("+string(o.name)+": ") {
			t.Errorf("oracle %s: OptOut's error for an unknown oracle does not offer it: %q", o.name, p.Fatals())
		}
	}
}

// TestLastPassErrorsLeaveOutAStoppedInstancesPasses: a restart point on the leader of two instances on one
// Lease cut its passes short (a refused write, "context canceled"), and the follower that took over reconciles
// under its own name, so those passes stayed the leader's last and the convergence oracle failed the run. A
// pass that ended after its instance was stopped is no error of the operator's; one that failed before the
// stop still is, and so is a failing pass of the manager's next instance.
func TestLastPassErrorsLeaveOutAStoppedInstancesPasses(t *testing.T) {
	r := newRecorder(newScheme(), newBroadcast(), newScopes())
	req := func(name string) ctrl.Request {
		return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
	}
	first, next, b := &wrappingManager{}, &wrappingManager{}, &wrappingManager{}
	cut := r.beginPass("a", "cluster", req("mg"), &first.stopped)
	failed := r.beginPass("a", "shard", req("mg-0"), &first.stopped)
	r.endPass(failed, false, errors.New("apply shard: conflict"), 0, 0)
	first.markStopped()
	r.endPass(cut, false, fmt.Errorf("apply tablegroup: %w", context.Canceled), 0, 0)
	// A pass the stopped instance's worker began after the stop still ends by it.
	late := r.beginPass("a", "tablegroup", req("mg-tg"), &first.stopped)
	r.endPass(late, false, errors.New("apply shard: manager a was stopped by point restart@a#1"), 0, 0)
	other := r.beginPass("b", "cluster", req("mg"), &b.stopped)
	r.endPass(other, false, errors.New("b failed on its own"), 0, 0)
	again := r.beginPass("a", "pool", req("mg-0"), &next.stopped)
	r.endPass(again, false, errors.New("a's next instance failed"), 0, 0)
	var got []string
	for _, p := range r.lastPassErrors("ns") {
		got = append(got, p.Manager+"/"+p.Controller)
	}
	if want := []string{"a/shard", "b/cluster", "a/pool"}; !slices.Equal(got, want) {
		t.Errorf("last passes in error %q, want %q: a pass its instance's stop ended is left out, the others are not", got, want)
	}
}
