package suite

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Oracle names one of the checks every Case runs without being asked (docs/architecture.md, "Oracles").
// A spec turns one off with Case.OptOut and a reason.
type Oracle string

// The oracles every case runs.
const (
	// HotLoop fails a case in which the writers of one object (one incarnation: one uid, so a name
	// deleted and created again starts afresh) answer each other's writes at 10 writes/s or more for 1.5 s (at least 5 writes in each of three consecutive 500 ms slices, and no other
	// object of the namespace changed in between by a writer that does not write this object), such as two
	// field managers flipping a field. It counts the
	// writes of the operators and fakes that changed the object or were rejected; not the spec's own, not
	// no-ops, and not the writes of passes a requeue woke (see Pass.Requeued), whose pace a time scale and
	// requeue compression set. Other loops never settle, and Convergence fails them. It watches while the
	// spec runs and notes the moment the threshold is crossed.
	HotLoop Oracle = "hot-loop"
	// SharedFields fails a case in which, at its end, a leaf field of an object in its namespace is owned by
	// two field managers in managedFields, unless the spec declared the field with AllowSharedField.
	SharedFields Oracle = "shared-fields"
	// Convergence fails a case whose objects do not stop changing (250 ms without a change and without a
	// running pass; writes that change nothing, such as a periodic requeue's, do not count) within 10 s of
	// the spec's end, whose last pass of a controller key ended in an error, or in whose namespace no
	// controller ever ran a reconcile pass.
	Convergence Oracle = "convergence"
	// Differential fails a case run with ENSEMBLE_BASELINE (as make explore runs a perturbed spec) whose end
	// state differs from the unperturbed runs' of the same spec, field by field: the case's objects after
	// the other oracles, without the fields that differ between the unperturbed runs themselves or by
	// nature (see perturb.Volatile). A case that opted out of Convergence is not judged: its end state is
	// not a settled one.
	Differential Oracle = "differential"
)

// The hot-loop threshold: an object written at least hotLoopPerSlice times in each of hotLoopSlices
// consecutive slices of hotLoopSlice, that is at 10 writes/s or more for 1.5 s. Sustained, so that the burst
// of writes a healthy object takes while it comes up (up to 30 within a second, measured) is not a loop; a
// 10 writes/s loop crosses it about 1.5 s after it starts.
const (
	hotLoopSlice    = 500 * time.Millisecond
	hotLoopSlices   = 3
	hotLoopPerSlice = 5
)

// The convergence bound: quiet for convergenceWindow within convergenceTimeout.
const (
	convergenceWindow  = 250 * time.Millisecond
	convergenceTimeout = 10 * time.Second
)

var oracles = []Oracle{HotLoop, SharedFields, Convergence, Differential}

// OptOut turns the oracle o off for this case. reason (required) says why the spec's operator may do what
// the oracle forbids, e.g. that a live defect pinned by the spec keeps the namespace busy; it is shown in the
// spec's report. An unknown oracle or an empty reason fails the test.
func (c *Case) OptOut(o Oracle, reason string) {
	c.t.Helper()
	if !knownOracle(o) {
		c.fatalf("suite: OptOut(%q): no such oracle: use suite.HotLoop, suite.SharedFields, suite.Convergence or suite.Differential", o)
		return
	}
	if strings.TrimSpace(reason) == "" {
		c.fatalf("suite: OptOut(%s) without a reason: say why this spec's operator may do what the oracle forbids", o)
		return
	}
	c.mu.Lock()
	if c.optOuts == nil {
		c.optOuts = map[Oracle]string{}
	}
	c.optOuts[o] = reason
	c.mu.Unlock()
	c.report("oracle "+string(o)+" opted out", reason)
}

// AllowSharedField declares that the leaf field path (as OwnershipOf names it, e.g.
// "status.conditions[type=Ready].status") of the object kind/name may be owned by more than one field
// manager at the case's end; reason is shown in the spec's report. The SharedFields oracle still checks
// every other field. A malformed path (see the form in its error) fails the test.
func (c *Case) AllowSharedField(kind, name, path, reason string) {
	c.t.Helper()
	if kind == "" || name == "" || path == "" || strings.TrimSpace(reason) == "" {
		c.fatalf("suite: AllowSharedField(%q, %q, %q, %q): give the object's kind and name, the field path and why two field managers may own it", kind, name, path, reason)
		return
	}
	if err := checkFieldPath(path); err != nil {
		c.fatalf("suite: AllowSharedField(%q, %q, %q, ...): %v", kind, name, path, err)
		return
	}
	c.mu.Lock()
	if c.sharedOK == nil {
		c.sharedOK = map[string]bool{}
	}
	c.sharedOK[kind+"/"+name+" "+path] = true
	c.mu.Unlock()
	c.report("shared field allowed", fmt.Sprintf("%s/%s %s: %s", kind, name, path, reason))
}

func knownOracle(o Oracle) bool {
	for _, k := range oracles {
		if k == o {
			return true
		}
	}
	return false
}

// report adds a report entry shown without -v (Ginkgo), or logs it.
func (c *Case) report(name, msg string) {
	if r, ok := c.t.(reporter); ok {
		r.AddReportEntryVisibilityAlways(name, msg)
	} else {
		c.t.Logf("%s: %s", name, msg)
	}
}

func (c *Case) optedOut(o Oracle) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.optOuts[o]
	return ok
}

// runOracles runs the oracles the spec did not opt out of and returns their failures. Convergence runs
// only while the spec has not failed otherwise: its wait would only delay the report of the first failure.
func (c *Case) runOracles() []string {
	var out []string
	if !c.optedOut(HotLoop) {
		out = append(out, c.hotLoopErrors()...)
	}
	if !c.optedOut(SharedFields) {
		shared := c.sharedFieldErrors()
		if len(shared) > 0 {
			c.mark(fmt.Sprintf("oracle %s: %d fields owned by two field managers", SharedFields, len(shared)))
		}
		out = append(out, shared...)
	}
	if !c.optedOut(Convergence) && !c.t.Failed() && len(out) == 0 {
		if err := c.converged(); err != nil {
			first, _, _ := strings.Cut(err.Error(), "\n")
			c.mark(first)
			out = append(out, err.Error())
		}
	}
	return out
}

// hotLoopErrors renders each object of the case's namespace that crossed the hot-loop threshold.
func (c *Case) hotLoopErrors() []string {
	var out []string
	for _, h := range c.s.rec.hotLoopsIn(c.Namespace, c.Started) {
		c.markAt(h.At, fmt.Sprintf("oracle %s: %s/%s", HotLoop, h.Kind, h.Name))
		out = append(out, h.String()+c.fieldsWritten(h))
	}
	return out
}

// fieldsWritten names the fields the hot loop's writes changed, most often changed first.
func (c *Case) fieldsWritten(h hotLoop) string {
	byRV := map[string]bool{}
	for _, w := range h.writes {
		byRV[w.ResourceVersion] = true
	}
	fields := map[string]int{}
	for _, ch := range c.s.stream.changes(c.Namespace, ChangeFilter{Kind: h.Kind, Name: h.Name, Since: h.First}) {
		if byRV[ch.ResourceVersion] {
			for _, f := range ch.Fields {
				fields[f.Path+": "+f.Old+" -> "+f.New]++
			}
		}
	}
	if len(fields) == 0 {
		return "; the writes changed no field the stream compares (timestamps, resourceVersion and managedFields are set aside)"
	}
	return "; fields changed (times):\n" + indent(topN(fields, 6))
}

// sharedFieldErrors renders each leaf field of a case object owned by two field managers that the spec did
// not declare.
func (c *Case) sharedFieldErrors() []string {
	c.mu.Lock()
	allowed := c.sharedOK
	c.mu.Unlock()
	var out []string
	for _, o := range c.leftovers() {
		own, err := OwnershipOf(o)
		if err != nil {
			out = append(out, fmt.Sprintf("oracle %s: %s/%s: %v", SharedFields, o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err))
			continue
		}
		kind := o.GetObjectKind().GroupVersionKind().Kind
		shared := own.sharedFields()
		paths := make([]string, 0, len(shared))
		for p := range shared {
			if !allowed[kind+"/"+o.GetName()+" "+p] {
				paths = append(paths, p)
			}
		}
		sort.Strings(paths)
		for _, p := range paths {
			out = append(out, fmt.Sprintf("oracle %s: %s/%s field %s is owned by field managers %s (declare it with AllowSharedField if both may own it)", SharedFields, kind, o.GetName(), p, strings.Join(shared[p], " and ")))
		}
	}
	return out
}

// converged waits for the namespace to go quiet and checks that some controller reconciled in it.
func (c *Case) converged() error {
	ctx, cancel := context.WithTimeout(context.Background(), convergenceTimeout+time.Second)
	defer cancel()
	_, err := c.s.waitQuiescent(ctx, c.Namespace, c.Started, convergenceWindow, convergenceTimeout, StateOnly())
	if err == nil && len(c.Passes(PassFilter{})) == 0 {
		err = errors.New("no controller ever ran a reconcile pass in the namespace: is it admitted (see Unadmitted), are its kinds watched by a manager, did the spec create anything?")
	}
	if err != nil {
		return fmt.Errorf("oracle %s (opt out with a reason if the spec's operator may stay busy): %w", Convergence, err)
	}
	return nil
}

// hotLoop is the moment one object crossed the hot-loop threshold.
type hotLoop struct {
	Namespace, Kind, Name string
	// First and At are the first write in the window and the write that crossed the threshold.
	First, At time.Time
	// N is the number of writes in the window; Writers counts them by writer and verb.
	N       int
	Writers map[string]int
	writes  []Write
}

func (h hotLoop) String() string {
	var w []string
	for k, n := range h.Writers {
		w = append(w, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(w)
	return fmt.Sprintf("oracle %s: %s/%s was written %d times within %s, at 10/s or more throughout (%s to %s): %s", HotLoop, h.Kind, h.Name, h.N,
		h.At.Sub(h.First).Round(time.Millisecond), h.First.Format("15:04:05.000"), h.At.Format("15:04:05.000"), strings.Join(w, ", "))
}

// hotLoops keeps, per object incarnation (kind, namespace, name and uid), the writes of the last 1.5 s and
// the first crossing of the threshold. Guarded by the recorder's lock.
type hotLoops struct {
	// uid is the uid of each name's latest incarnation (kind/namespace/name), which a write that names no
	// uid (a create the API server refused, an apply) is counted against.
	uid map[string]types.UID
	// rv is each object's resourceVersion after its latest recorded write.
	rv map[string]string
	// nsSeq counts the writes that changed an object, per namespace, and nsLog keeps the last 1.5 s of
	// them; lastSeq is the count after each object's latest write.
	nsSeq   map[string]int64
	nsLog   map[string][]nsWrite
	lastSeq map[string]int64
	// writers holds every writer of each object.
	writers map[string]map[string]bool
	recent  map[string][]Write
	tripped map[string]hotLoop
}

func newHotLoops() *hotLoops {
	return &hotLoops{uid: map[string]types.UID{}, rv: map[string]string{}, nsSeq: map[string]int64{}, nsLog: map[string][]nsWrite{}, lastSeq: map[string]int64{}, writers: map[string]map[string]bool{}, recent: map[string][]Write{}, tripped: map[string]hotLoop{}}
}

// observe adds a write and notes the first time its object crosses the threshold.
func (h *hotLoops) observe(w Write) {
	if w.Name == "" {
		return
	}
	id := h.incarnation(w)
	if w.Err == nil && w.ResourceVersion != "" {
		if h.rv[id] == w.ResourceVersion {
			return // a no-op: the object did not change, so no watch event can answer it
		}
		h.rv[id] = w.ResourceVersion
	}
	// An object of the namespace changed since this object's previous write by a writer that does not
	// write this object: the object is carried along by a progression (pods coming up, claims binding), not
	// answering its own writers.
	if h.interrupted(id, w) {
		h.recent[id] = nil
	}
	if w.Err == nil {
		h.nsSeq[w.Namespace]++
		log := append(h.nsLog[w.Namespace], nsWrite{seq: h.nsSeq[w.Namespace], id: id, writer: w.writer(), at: w.Time})
		i := 0
		for i < len(log) && w.Time.Sub(log[i].at) >= hotLoopSlice*hotLoopSlices {
			i++
		}
		h.nsLog[w.Namespace] = log[i:]
	}
	h.lastSeq[id] = h.nsSeq[w.Namespace]
	span := hotLoopSlice * hotLoopSlices
	ws := append(h.recent[id], w)
	i := 0
	for i < len(ws) && w.Time.Sub(ws[i].Time) >= span {
		i++
	}
	ws = ws[i:]
	h.recent[id] = ws
	if _, done := h.tripped[id]; done || len(ws) < hotLoopPerSlice*hotLoopSlices {
		return
	}
	var per [hotLoopSlices]int
	for _, x := range ws {
		per[w.Time.Sub(x.Time)/hotLoopSlice]++
	}
	for _, n := range per {
		if n < hotLoopPerSlice {
			return
		}
	}
	writers := map[string]int{}
	for _, x := range ws {
		writers[x.writer()+" "+string(x.Verb)]++
	}
	h.tripped[id] = hotLoop{Namespace: w.Namespace, Kind: w.Kind, Name: w.Name, First: ws[0].Time, At: w.Time, N: len(ws), Writers: writers, writes: append([]Write(nil), ws...)}
}

// incarnation names the object incarnation w wrote: "kind/namespace/name uid". A write that names no uid
// is counted against the name's latest incarnation; one that succeeded with a new uid makes it the latest.
func (h *hotLoops) incarnation(w Write) string {
	name := w.Kind + "/" + w.Namespace + "/" + w.Name
	uid := w.UID
	switch {
	case uid == "":
		uid = h.uid[name]
	case w.Err == nil:
		h.uid[name] = uid
	}
	return name + " " + string(uid)
}

// nsWrite is a write that changed an object, in its namespace's order.
type nsWrite struct {
	seq        int64
	id, writer string
	at         time.Time
}

// interrupted reports whether, since object id's previous write, another object of w's namespace was
// changed by a writer that never wrote id.
func (h *hotLoops) interrupted(id string, w Write) bool {
	writers := h.writers[id]
	if writers == nil {
		writers = map[string]bool{}
		h.writers[id] = writers
	}
	writers[w.writer()] = true
	for _, x := range h.nsLog[w.Namespace] {
		if x.seq > h.lastSeq[id] && x.id != id && !writers[x.writer] {
			return true
		}
	}
	return false
}

// hotLoopsIn returns the crossings in namespace ns at or after since, earliest first.
func (r *recorder) hotLoopsIn(ns string, since time.Time) []hotLoop {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []hotLoop
	for _, h := range r.hot.tripped {
		if h.Namespace == ns && !h.At.Before(since) {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}
