package explore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// Pruned is a point the enumeration made and does not run: By, a point that is run, stands for it.
type Pruned struct {
	Spec  string
	Point string
	// By is the representative of the point's class, kept: the first point of the class.
	By string
}

// prune splits e's points into those that run and those a kept point stands for, by causality over the
// unperturbed runs' writes, reads and changes: two points of one mode that differ only in which of a
// chain of triggers they fire on are equivalent when nothing that could tell their effects apart happened
// between those triggers in both unperturbed runs, and the first point of each chain is kept. What could
// tell them apart depends on the mode (link says it for write triggers, changeLink for change triggers,
// noCallBetween for outages and latency); see docs/architecture.md §10. A spec whose runs did not
// each record exactly one case with its reads (perturb.Record.ReadsRecorded) loses no point. Order is kept.
func prune(points []SpecPoint, records, second []perturb.Record) (kept []SpecPoint, pruned []Pruned) {
	timelines := map[string][2]*perturb.Record{}
	for _, spec := range specNames(records) {
		a, b := onlyRecord(records, spec), onlyRecord(second, spec)
		if a != nil && b != nil && a.ReadsRecorded && b.ReadsRecorded {
			timelines[spec] = [2]*perturb.Record{inTimeOrder(a), inTimeOrder(b)}
		}
	}
	// outage are each spec's chains of down and slow triggers, made at its first such point; starts are the
	// chains of each spec's write and change triggers, by chainKey.
	outage := map[string]*outageChains{}
	starts := map[string][]int{}
	for _, sp := range points {
		recs, ok := timelines[sp.Spec]
		if !ok {
			kept = append(kept, sp)
			continue
		}
		var by perturb.Point
		var same bool
		switch p := sp.Point; {
		case p.Trigger.Kind == perturb.NthChange:
			by, same = representative(p, chainKey(sp.Spec, p), starts, func() []int { return changeChains(p, recs) })
		case p.Trigger.Kind != perturb.NthWrite:
		case p.Mode == perturb.Down || p.Mode == perturb.Slow:
			oc := outage[sp.Spec]
			if oc == nil {
				oc = newOutageChains(points, sp.Spec, recs)
				outage[sp.Spec] = oc
			}
			by, same = oc.representative(p)
		default:
			by, same = representative(p, chainKey(sp.Spec, p), starts, func() []int { return writeChains(p, recs) })
		}
		if same {
			pruned = append(pruned, Pruned{Spec: sp.Spec, Point: sp.Point.String(), By: by.String()})
			continue
		}
		kept = append(kept, sp)
	}
	return kept, pruned
}

// onlyRecord is spec's record in records when there is exactly one; nil otherwise.
func onlyRecord(records []perturb.Record, spec string) *perturb.Record {
	var out *perturb.Record
	for i := range records {
		if records[i].Spec == spec {
			if out != nil {
				return nil
			}
			out = &records[i]
		}
	}
	return out
}

// counted are the indexes into r.Writes of the writes write-triggered point p counts, in order (its k-th
// trigger is the k-th of them): the writes of a writer p names, on p's object, by name or by place.
func counted(r *perturb.Record, p perturb.Point) []int {
	var places perturb.Places
	var out []int
	for i, w := range r.Writes {
		kind, name, _ := strings.Cut(w.Object, "/")
		place := p.PlaceOf(&places, w.Writer, w.Verb, kind, name)
		if p.Counts(w.Writer, kind, name, place) {
			out = append(out, i)
		}
	}
	return out
}

// sameShape reports whether two writes would meet a point alike: the same writer, verb and subresource,
// both refused or both not.
func sameShape(a, b perturb.RecordWrite) bool {
	return a.Writer == b.Writer && a.Verb == b.Verb && a.Subresource == b.Subresource && a.Rejected == b.Rejected
}

// link reports whether, in r, a write-triggered point of mode m fired on write a and one fired on write b,
// the next write the point counts after a, are equivalent: a and b have the same shape (sameShape), both
// have times, and either the world the two perturbations leave is the same until b (sameWorld), or nothing
// r shows between them could tell their effects apart (unread).
func link(r *perturb.Record, m perturb.Mode, a, b int) bool {
	wa, wb := r.Writes[a], r.Writes[b]
	if !sameShape(wa, wb) || wa.At.IsZero() || wb.At.IsZero() || wa.Object != wb.Object {
		return false
	}
	return sameWorld(r, m, a, b) || unread(r, m, a, b)
}

// sameWorld reports whether a point of mode m on write a leaves every other controller the same world as
// one on write b, from a until b, because what the earlier firing takes away changed nothing:
//   - a refusal takes away the refused write's change until the writer retries: equivalent when neither a
//     nor b changed anything (no-ops), so every reader sees every object as it is either way; what remains
//     is the writer's own error path, the same at a and b, in which the writes its pass would have made
//     after the refused one come a retry later (controller-runtime's first backoff is 5 ms);
//   - restart after a takes away what the manager would have written between a and b (the fence refuses
//     it, b included): equivalent when none of the manager's writes in that span changed anything; its
//     reads went with the crashed instance's state;
//   - stale and coalesce from a hide from the writer's manager what changed the object between a and b:
//     equivalent when nothing did (a a no-op, no other write of the object changed it, the event stream saw
//     no change of it), so the manager's view is the same at every moment. A hold may reach every object
//     of the kind in that manager (a hold of its informer's whole stream), so this asks it of the kind.
func sameWorld(r *perturb.Record, m perturb.Mode, a, b int) bool {
	wa, wb := r.Writes[a], r.Writes[b]
	obj, manager := wa.Object, managerOf(wa.Writer)
	switch {
	case m.Fault():
		return !wa.Changed() && !wb.Changed()
	case m == perturb.Restart:
		for _, w := range r.Writes[a+1 : b+1] {
			if managerOf(w.Writer) == manager && w.Changed() {
				return false
			}
		}
		return true
	case m == perturb.Stale || m == perturb.Coalesce:
		// The hold may reach every object of the kind in that manager (the whole stream of its informer),
		// so nothing of the kind may change between.
		kind := kindOfObject(obj)
		if wa.Changed() {
			return false
		}
		for _, w := range append(r.Writes[a+1:b:b], othersIn(r, wa.At, wb.At)...) {
			if kindOfObject(w.Object) == kind && w.Changed() {
				return false
			}
		}
		for o, times := range r.ChangeTimes {
			if kindOfObject(o) != kind {
				continue
			}
			for _, t := range times {
				if t.After(wa.At) && t.Before(wb.At) {
					return false
				}
			}
		}
		return true
	}
	return false
}

// unread reports whether, in r, nothing between writes a and b of one writer on one object could carry a
// difference between a point of mode m on a and one on b into a decision: no other writer wrote the object
// between them (the spec and kube-controller-manager included), and nobody the mode affects read it (a Get
// of it, a List of its kind):
//   - a refusal (conflict, throttle, internal, timeout) keeps the object without a's change until the
//     writer retries: the writer's own error path is the same at a and b, so only another reader (another
//     controller, or another manager) could tell them apart;
//   - restart stops the writer's manager after a instead of after b: only another reader could have seen
//     the object between them, and the manager's writes of other objects between them are what the
//     earlier crash leaves undone, so any of them breaks the link too;
//   - stale and coalesce hide the object from the writer's manager from a instead of from b: only that
//     manager's reads (the writer's own included) see the difference, of any object of the kind (a hold
//     may reach the kind's whole stream).
func unread(r *perturb.Record, m perturb.Mode, a, b int) bool {
	wa, wb := r.Writes[a], r.Writes[b]
	obj, writer := wa.Object, wa.Writer
	manager := managerOf(writer)
	for i := a + 1; i < b; i++ {
		w := r.Writes[i]
		if w.Object == obj && w.Writer != writer {
			return false
		}
		if m == perturb.Restart && managerOf(w.Writer) == manager {
			return false
		}
	}
	for _, w := range othersIn(r, wa.At, wb.At) {
		if w.Object == obj {
			return false
		}
	}
	for _, rd := range readsIn(r, wa.At, wb.At) {
		switch m {
		case perturb.Stale, perturb.Coalesce:
			// Any read of the kind: the hold may reach the whole stream of the kind's informer.
			if managerOf(rd.Reader) == manager && kindOfObject(rd.Object) == kindOfObject(obj) {
				return false
			}
		default:
			if !rd.Covers(obj) {
				continue
			}
			if rd.Reader != writer {
				return false
			}
		}
	}
	return true
}

// modeClass is what decides a chain for mode m: the four refusals share one, as do stale and coalesce.
func modeClass(m perturb.Mode) string {
	switch {
	case m.Fault():
		return "refusal"
	case m == perturb.Stale || m == perturb.Coalesce:
		return "held"
	}
	return string(m)
}

// chainKey names the chains p's trigger is one of: its spec, writer, object, trigger kind and mode class.
func chainKey(spec string, p perturb.Point) string {
	return spec + "\x00" + p.Writer + "\x00" + p.Object + "\x00" + string(rune(p.Trigger.Kind)) + modeClass(p.Mode)
}

// representative is p with the trigger that starts its chain, from starts[key] (made by chains when not
// there yet: the first trigger of the chain of each trigger, from 1, index k-1 for trigger k); same is false
// when that is p's own.
func representative(p perturb.Point, key string, starts map[string][]int, chains func() []int) (perturb.Point, bool) {
	st, ok := starts[key]
	if !ok {
		st = chains()
		starts[key] = st
	}
	k := p.Trigger.N
	if k < 1 || k > len(st) || st[k-1] == k {
		return p, false
	}
	rep := p
	rep.Trigger.N = st[k-1]
	return rep, true
}

// startsOf turns links (links[i]: triggers i+1 and i+2 link) into each of n triggers' chain start.
func startsOf(n int, links func(k int) bool) []int {
	st := make([]int, n)
	for k := 1; k <= n; k++ {
		st[k-1] = k
		if k > 1 && links(k-1) {
			st[k-1] = st[k-2]
		}
	}
	return st
}

// writeChains are the chain starts of write-triggered point p's triggers: k links to k+1 when the k-th and
// (k+1)-th writes p counts link (link) in both records.
func writeChains(p perturb.Point, recs [2]*perturb.Record) []int {
	idx := [2][]int{counted(recs[0], p), counted(recs[1], p)}
	n := min(len(idx[0]), len(idx[1]))
	return startsOf(n, func(k int) bool {
		return link(recs[0], p.Mode, idx[0][k-1], idx[0][k]) && link(recs[1], p.Mode, idx[1][k-1], idx[1][k])
	})
}

// changeChains are the chain starts of change-triggered point p's triggers: j links to j+1 when changeLink
// says so in both records. None for a mode the enumeration makes no change point of.
func changeChains(p perturb.Point, recs [2]*perturb.Record) []int {
	if p.Mode != perturb.Restart && p.Mode != perturb.Stale && p.Mode != perturb.Coalesce {
		return nil
	}
	n := min(recs[0].Seen[p.Manager()][p.Object], recs[1].Seen[p.Manager()][p.Object])
	return startsOf(n, func(j int) bool { return changeLink(recs[0], p, j) && changeLink(recs[1], p, j) })
}

// inTimeOrder is a copy of r whose Writes, Others and Reads are sorted by their times (stably: writes
// keep their order, which points count in, when their times tie).
func inTimeOrder(r *perturb.Record) *perturb.Record {
	c := *r
	c.Writes = slices.Clone(r.Writes)
	c.Others = slices.Clone(r.Others)
	c.Reads = slices.Clone(r.Reads)
	byAt := func(a, b perturb.RecordWrite) int { return a.At.Compare(b.At) }
	slices.SortStableFunc(c.Others, byAt)
	slices.SortStableFunc(c.Reads, func(a, b perturb.RecordRead) int { return a.At.Compare(b.At) })
	return &c
}

// readsIn are r's reads in (from, to]; r's reads are in time order (inTimeOrder).
func readsIn(r *perturb.Record, from, to time.Time) []perturb.RecordRead {
	i, _ := slices.BinarySearchFunc(r.Reads, from, func(rd perturb.RecordRead, t time.Time) int {
		if rd.At.After(t) {
			return 1
		}
		return -1
	})
	j, _ := slices.BinarySearchFunc(r.Reads, to, func(rd perturb.RecordRead, t time.Time) int {
		if rd.At.After(t) {
			return 1
		}
		return -1
	})
	return r.Reads[i:j]
}

// othersIn are r's Others in (from, to]; r's Others are in time order (inTimeOrder).
func othersIn(r *perturb.Record, from, to time.Time) []perturb.RecordWrite {
	return writesBetween(r.Others, from, to)
}

// writesIn are r's Writes in (from, to]; r's Writes are in time order, as a case records them.
func writesIn(r *perturb.Record, from, to time.Time) []perturb.RecordWrite {
	return writesBetween(r.Writes, from, to)
}

// writesBetween are the writes of ws, which are in time order, in (from, to].
func writesBetween(ws []perturb.RecordWrite, from, to time.Time) []perturb.RecordWrite {
	after := func(w perturb.RecordWrite, t time.Time) int {
		if w.At.After(t) {
			return 1
		}
		return -1
	}
	i, _ := slices.BinarySearchFunc(ws, from, after)
	j, _ := slices.BinarySearchFunc(ws, to, after)
	return ws[i:j]
}

// changeLink reports whether, in r, point p (a change trigger of manager M on object O) fired at O's j-th
// change as M's watch delivers it and at its (j+1)-th can only differ through what M did between those
// changes, and M did nothing that could: stale and coalesce hide O from M from one change or the next, which
// only M's reads of O tell apart; restart stops M before it could act on one change or the next, and only
// M's writes that changed something between them act on the world (its reads go with the crashed
// instance's state).
func changeLink(r *perturb.Record, p perturb.Point, j int) bool {
	times := r.ChangeTimes[p.Object]
	mgr := p.Manager()
	// M's watch delivers the changes after its informer began watching: its j-th is the overall
	// (len-seen+j)-th.
	off := len(times) - r.Seen[mgr][p.Object]
	if off < 0 || off+j >= len(times) {
		return false
	}
	from, to := times[off+j-1], times[off+j]
	if p.Mode == perturb.Restart {
		for _, w := range writesIn(r, from, to) {
			if managerOf(w.Writer) == mgr && w.Changed() {
				return false
			}
		}
		return true
	}
	for _, rd := range readsIn(r, from, to) {
		if managerOf(rd.Reader) == mgr && kindOfObject(rd.Object) == kindOfObject(p.Object) {
			return false
		}
	}
	return true
}

// outageChains joins the down and slow points of one spec, system by system, whose triggers follow one
// another in the case's writes (whoever wrote them) with no call to the system between them in either
// unperturbed run (perturb.Record.Calls): an outage or a latency acts only on the calls it meets, and one
// that begins at either trigger meets the same calls, until the same release. A system a record has no
// calls for (its suite.External cannot say) gets no chain.
type outageChains struct {
	// at maps each point's string to its trigger write's index in each record.
	at map[string][2]int
	// first[i][system][x] is the first write index of record i whose chain holds write x.
	first [2]map[string][]int
	// best maps a group (mode, system and latency, and the chain in each record) to its point whose
	// trigger is earliest in the first record.
	best map[string]perturb.Point
}

// newOutageChains finds the trigger writes of spec's down and slow points in both records, and the
// earliest point of each chain.
func newOutageChains(points []SpecPoint, spec string, recs [2]*perturb.Record) *outageChains {
	oc := &outageChains{at: map[string][2]int{}, best: map[string]perturb.Point{}}
	for i, r := range recs {
		oc.first[i] = map[string][]int{}
		for sys, calls := range r.Calls {
			first := make([]int, len(r.Writes))
			for x := range r.Writes {
				first[x] = x
				if x > 0 && noCallBetween(calls, r.Writes[x-1], r.Writes[x]) {
					first[x] = first[x-1]
				}
			}
			oc.first[i][sys] = first
		}
	}
	idx := map[string][2][]int{}
	for _, sp := range points {
		p := sp.Point
		if sp.Spec != spec || p.Mode != perturb.Down && p.Mode != perturb.Slow || p.Trigger.Kind != perturb.NthWrite ||
			oc.first[0][p.System] == nil || oc.first[1][p.System] == nil {
			continue
		}
		key := p.Writer + "\x00" + p.Object
		ix, ok := idx[key]
		if !ok {
			ix = [2][]int{counted(recs[0], p), counted(recs[1], p)}
			idx[key] = ix
		}
		k := p.Trigger.N
		if len(ix[0]) < k || len(ix[1]) < k {
			continue
		}
		at := [2]int{ix[0][k-1], ix[1][k-1]}
		oc.at[p.String()] = at
		g := oc.group(p, at)
		if b, ok := oc.best[g]; !ok || at[0] < oc.at[b.String()][0] {
			oc.best[g] = p
		}
	}
	return oc
}

// group names the chain of p, whose trigger writes are at.
func (oc *outageChains) group(p perturb.Point, at [2]int) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d", p.Mode, p.System, p.Latency, oc.first[0][p.System][at[0]], oc.first[1][p.System][at[1]])
}

// representative is the point of p's chain whose trigger is earliest, when it is earlier than p's in both
// records; same is false otherwise.
func (oc *outageChains) representative(p perturb.Point) (perturb.Point, bool) {
	at, ok := oc.at[p.String()]
	if !ok {
		return p, false
	}
	b := oc.best[oc.group(p, at)]
	bat := oc.at[b.String()]
	if bat[0] >= at[0] || bat[1] >= at[1] {
		return p, false
	}
	return b, true
}

// noCallBetween reports whether none of calls (in time order) came in (a.At, b.At], and both writes have
// times.
func noCallBetween(calls []time.Time, a, b perturb.RecordWrite) bool {
	if a.At.IsZero() || b.At.IsZero() {
		return false
	}
	i, _ := slices.BinarySearchFunc(calls, a.At, func(c, t time.Time) int {
		if c.After(t) {
			return 1
		}
		return -1
	})
	return i == len(calls) || calls[i].After(b.At)
}
