package suite

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// Verb is the kind of a recorded write.
type Verb string

// The verbs of recorded writes. A server-side apply is VerbApply whether it was sent with Apply or as a Patch
// of type application/apply-patch+yaml. VerbAdmit is an admission webhook's answer to another writer's
// write (Write.Admission says what it answered). VerbConvert is a CRD conversion webhook's conversion of one
// object to the apiVersion the API server asked for (Write.Conversion says which): part of a read, a list or
// a watch, it changes nothing, so quiescence, the oracles and perturbation points leave it out.
const (
	VerbCreate      Verb = perturb.VerbCreate
	VerbUpdate      Verb = "update"
	VerbPatch       Verb = "patch"
	VerbApply       Verb = "apply"
	VerbDelete      Verb = "delete"
	VerbDeleteAllOf Verb = "deleteallof"
	VerbAdmit       Verb = "admit"
	VerbConvert     Verb = "convert"
)

// CaseFieldManager is the field manager of every write a Case's client makes, so that what a spec wrote shows
// in managedFields under one fixed name.
const CaseFieldManager = "ensemble-case"

// Write is one write a controller (or a Case) attempted against the API server, successful or not.
type Write struct {
	// Seq numbers writes across the whole suite, from 1, in the order they were recorded. A write read from
	// kube-apiserver's audit log is recorded up to a poll interval after it returned, so Seq and Time may
	// disagree; the queries order writes by Time.
	Seq int64
	// Time is when the call returned (for a write read from the audit log, when kube-apiserver completed it).
	Time time.Time
	// Manager names the writer's manager (ManagerOptions.Name, or "case" for a Case's client). Controller is
	// the name controller-runtime's builder gave the controller whose reconcile pass made the write. Outside a
	// pass it is the component a client of the manager names in its User-Agent (rest.AddUserAgent, e.g.
	// LeaderElection) or the Runnable whose context it was made on, else empty (a fake's timer, an event
	// recorder, a context not derived from the pass's); "spec" for a Case. For VerbAdmit, Manager is the
	// manager that serves webhooks and Controller the webhook's name in its configuration; for VerbConvert,
	// the same manager and the CRD's name ("gadgets.example.com").
	// A write no client of the harness sent is read from kube-apiserver's audit log: kube-controller-manager's
	// is Manager "kube-controller-manager" with the controller its User-Agent names (Controller
	// "replicaset-controller", "generic-garbage-collector"); any other's Manager is the user it authenticated
	// as, with the controller its User-Agent appends to client-go's default form, if any.
	Manager, Controller string
	// Pass is the Pass.ID of the reconcile pass that made the write; 0 outside a pass.
	Pass int64
	// Verb is what the write did. A patch read from the audit log is VerbPatch even when it was a server-side
	// apply: the audit event does not carry the patch's content type.
	Verb Verb
	// Subresource is "status" (or another subresource name) for a subresource write; empty otherwise.
	Subresource string
	// Kind is the object's kind, e.g. "Shard"; Namespace and Name its key (Name empty for VerbDeleteAllOf).
	Kind, Namespace, Name string
	// ResourceVersion is the object's resourceVersion the API server answered with; empty for a rejected
	// write, for deletes, for subresource creates (a pods/binding answers with no pod) and for conversions.
	// The Change with the same resourceVersion is the one this write made.
	ResourceVersion string
	// UID is the object's metadata.uid: the API server's answer for a write that succeeded, else the uid
	// the writer's object carried (empty when it carried none, as a create's or an apply's often does).
	// A name deleted and created again is another object, with another uid.
	UID types.UID
	// FieldOwner is the field manager the write named; empty when it named none (the API server then
	// derives one from the User-Agent).
	FieldOwner string
	// Err is the API server's answer for a rejected write (conflict, validation, not found, ...); nil when
	// the write succeeded. A write a perturbation point answered was never sent: Err is the point's error.
	// For VerbAdmit, the webhook's denial; for VerbConvert, the conversion's failure (the whole review's: the
	// API server's read failed).
	Err error
	// Point is the perturbation point (perturb.Point's string) that fired on this write or refused it; empty
	// for a write no point touched.
	Point string
	// Admission is what the webhook answered, for VerbAdmit; nil for every other write.
	Admission *Admission
	// Conversion is the conversion the webhook was asked for, for VerbConvert; nil for every other write.
	Conversion *Conversion

	// scope is the namespace of the Case the object belongs to (see scopes): Namespace, or for a
	// cluster-scoped object the claiming Case's; "" for an object no Case claimed.
	scope string
	// audited is true for a write read from kube-apiserver's audit log (auditReader): no client of the
	// harness sent it.
	audited bool
}

// writer is "manager/controller" (or the manager alone outside a pass), the name a write is attributed to.
func (w Write) writer() string {
	if w.Controller == "" {
		return w.Manager
	}
	return w.Manager + "/" + w.Controller
}

// String renders the write on one line: seq, time, writer, verb, subresource, object, pass, field owner and
// the error of a rejected write.
func (w Write) String() string { return w.line() }

// GomegaString renders the write as String does, in Gomega's failure messages.
func (w Write) GomegaString() string { return w.line() }

// line renders the write on one line for reports and dumps.
func (w Write) line() string {
	sub := ""
	if w.Subresource != "" {
		sub = "/" + w.Subresource
	}
	if a := w.Admission; a != nil {
		s := fmt.Sprintf("#%d %s %s %s %s%s %s/%s at %s", w.Seq, w.Time.Format("15:04:05.000"), w.writer(), w.Verb, a.Operation, sub, w.Kind, key(w.Namespace, w.Name), a.Path)
		if len(a.Patch) > 0 {
			s += " patch: " + strings.Join(a.Patch, ", ")
		}
		if w.Err != nil {
			s += " DENIED: " + w.Err.Error()
		}
		return s
	}
	if c := w.Conversion; c != nil {
		s := fmt.Sprintf("#%d %s %s %s %s/%s %s -> %s at %s", w.Seq, w.Time.Format("15:04:05.000"), w.writer(), w.Verb, w.Kind, key(w.Namespace, w.Name), c.From, c.version(), c.Path)
		if w.Err != nil {
			s += " FAILED: " + w.Err.Error()
		}
		return s
	}
	s := fmt.Sprintf("#%d %s %s %s%s %s/%s pass=%d owner=%q", w.Seq, w.Time.Format("15:04:05.000"), w.writer(), w.Verb, sub, w.Kind, key(w.Namespace, w.Name), w.Pass, w.FieldOwner)
	if w.Err != nil {
		s += " REJECTED: " + w.Err.Error()
	}
	if w.Point != "" && w.Err == nil {
		s += " point=" + w.Point
	}
	return s
}

// Pass is one call of a wrapped reconciler: a reconcile pass, or a request the gate refused.
type Pass struct {
	// ID orders passes across the whole suite, from 1.
	ID int64
	// Manager and Controller name the reconciler: ManagerOptions.Name and the name controller-runtime's
	// builder gave the controller (the lowercased kind of For, or the name given to Named).
	Manager, Controller string
	// Request is the reconcile request.
	Request ctrl.Request
	// N counts the passes of this controller for this request, from 1.
	N int
	// Start and End bound the pass; End is zero while it runs.
	Start, End time.Time
	// Gated is true when the gate refused the request: the real reconciler was not called.
	Gated bool
	// Err is the error the pass returned; nil when it returned none.
	Err error
	// RequeueAfter is the delay handed to controller-runtime (after requeue compression); Asked is the delay
	// the reconciler asked for. Both are zero when no delayed requeue was asked.
	RequeueAfter, Asked time.Duration
	// Event is true when an event handler or source queued this request since the previous pass of this
	// controller key began (always for a key's first pass): something other than a requeue woke the pass,
	// however late its event arrived. Read from the controller's queue, so it does not depend on the load.
	Event bool
	// Requeued is true when no event queued the request (Event is false) and the previous pass of this
	// controller key ended without an error and asked for a delayed requeue: that requeue woke the pass. Read
	// from the queue as Event is. A pass after one that returned an error is neither Event nor Requeued:
	// controller-runtime retries an error with its rate limiter and ignores the delay asked. Under requeue
	// compression and a fixture's time scale requeue-woken passes run far sooner than in production.
	Requeued bool

	// scope is the namespace of the Case the request belongs to (see scopes.ofRequest), "" for none.
	scope string
	// instance holds when the manager instance that ran the pass was stopped (nil while it runs).
	instance *atomic.Pointer[time.Time]
}

// line renders the pass on one line for reports and dumps.
func (p Pass) line() string {
	s := fmt.Sprintf("pass %d %s %s/%s %s n=%d", p.ID, p.Start.Format("15:04:05.000"), p.Manager, p.Controller, p.Request.NamespacedName, p.N)
	switch {
	case p.Gated:
		s += " GATED"
	case p.Err != nil:
		s += " error: " + p.Err.Error()
	}
	if p.Asked > 0 {
		s += fmt.Sprintf(" requeueAfter=%s (asked %s)", p.RequeueAfter, p.Asked)
	}
	return s
}

type passKey struct {
	manager, controller string
	req                 types.NamespacedName
}

// recorder keeps every write and every reconcile pass of the suite, in order. It is safe for concurrent use;
// the queries return copies.
type recorder struct {
	mu       sync.Mutex
	writeLog []Write
	passLog  []*Pass
	perKey   map[passKey]int
	lastPass map[passKey]*Pass
	// queued is when an event last queued each controller key (see queuedByEvent).
	queued map[passKey]time.Time
	notify *broadcast
	scheme *runtime.Scheme
	hot    *hotLoops
	scopes *scopes
	// latest is the time of the latest write of each Case namespace (Write.scope).
	latest map[string]time.Time
	// catchUp, when set, records what kube-apiserver's audit log holds now (auditReader.catchUp); the queries
	// call it first, so they see every write that returned before they were called.
	catchUp func()
}

func newRecorder(scheme *runtime.Scheme, notify *broadcast, sc *scopes) *recorder {
	return &recorder{latest: map[string]time.Time{}, perKey: map[passKey]int{}, lastPass: map[passKey]*Pass{}, queued: map[passKey]time.Time{}, notify: notify, scheme: scheme, hot: newHotLoops(), scopes: sc}
}

// caseManager is the manager name of a Case's client.
const caseManager = "case"

// LeaderElection is the Controller of the writes a manager's leader election makes (controller-runtime
// names its client's User-Agent so): its Lease renewals, every 250 ms while it leads.
const LeaderElection = "leader-election"

// heartbeat reports whether w renews a leader election Lease. Quiescence and the hot-loop oracle leave such
// writes out: they go on for as long as the manager leads.
func (w Write) heartbeat() bool { return w.Controller == LeaderElection && w.Kind == "Lease" }

// answer reports whether w is a webhook's answer to another client's request (VerbAdmit, VerbConvert), not a
// write its writer made: the hot-loop oracle, perturbation points and case records leave it out.
func (w Write) answer() bool { return w.Verb == VerbAdmit || w.Verb == VerbConvert }

// quiet reports whether w leaves quiescence alone: a Lease renewal goes on for as long as the manager leads,
// and a conversion is part of a read, which changes nothing. An admission counts: it is part of a write.
func (w Write) quiet() bool { return w.heartbeat() || w.Verb == VerbConvert }

func (r *recorder) addWrite(w Write) {
	if w.scope == "" {
		w.scope = r.scopes.of(w.Kind, w.Namespace, w.Name)
	}
	r.mu.Lock()
	// Unlocked by defer, so that a panic here (which controller-runtime turns into a reconcile error) cannot
	// leave every later query of the recorder waiting.
	defer r.notify.signal()
	defer r.mu.Unlock()
	w.Seq = int64(len(r.writeLog) + 1)
	r.writeLog = append(r.writeLog, w)
	if !w.quiet() && w.Time.After(r.latest[w.scope]) {
		r.latest[w.scope] = w.Time
	}
	requeued := w.Pass > 0 && int(w.Pass) <= len(r.passLog) && r.passLog[w.Pass-1].Requeued
	// An admission is part of the write it admitted, which is counted already, and a conversion part of a
	// read. The hot-loop oracle judges the writers the harness records itself, in the order they return: a
	// write read from the audit log arrives late, out of that order, and is no operator's reconcile.
	if w.Manager != caseManager && !requeued && !w.heartbeat() && !w.answer() && !w.audited {
		r.hot.observe(w)
	}
}

// beginPass records the start of a pass of manager's controller for req; instance is the stop time of the
// manager instance that runs it (nil for none, see wrappingManager.stopped).
func (r *recorder) beginPass(manager, controller string, req ctrl.Request, instance *atomic.Pointer[time.Time]) *Pass {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := passKey{manager, controller, req.NamespacedName}
	r.perKey[k]++
	p := &Pass{ID: int64(len(r.passLog) + 1), Manager: manager, Controller: controller, Request: req, N: r.perKey[k], Start: time.Now(),
		scope: r.scopes.ofRequest(req.NamespacedName), instance: instance}
	if prev := r.lastPass[k]; prev != nil {
		p.Event = r.queued[k].After(prev.Start)
		p.Requeued = !p.Event && prev.Asked > 0 && prev.Err == nil
	} else {
		p.Event = true
	}
	r.passLog = append(r.passLog, p)
	r.lastPass[k] = p
	return p
}

// queuedByEvent notes that an event handler or source queued req for manager's controller now (an add with
// no delay and no rate limit: not a requeue).
func (r *recorder) queuedByEvent(manager, controller string, req ctrl.Request) {
	r.mu.Lock()
	r.queued[passKey{manager, controller, req.NamespacedName}] = time.Now()
	r.mu.Unlock()
}

func (r *recorder) endPass(p *Pass, gated bool, err error, after, asked time.Duration) {
	r.mu.Lock()
	p.End = time.Now()
	p.Gated, p.Err = gated, err
	p.RequeueAfter, p.Asked = after, asked
	r.mu.Unlock()
	r.notify.signal()
}

// WriteFilter selects a Case's writes; a zero field matches anything, except that writes the API server
// (or a perturbation point, or a stopped manager's fence) refused are left out unless IncludeRejected is set:
// a refused write changed nothing, and an assertion that a writer wrote must not be met by its failed
// attempt. Conversions (VerbConvert) are part of reads, not writes: they are left out unless Verb is
// VerbConvert.
type WriteFilter struct {
	Name, Kind, Manager, Controller, Subresource string
	Verb                                         Verb
	// Since keeps writes at or after this time.
	Since time.Time
	// IncludeRejected keeps refused writes too (Write.Err set): for an assertion that nobody even tried to
	// write, or one about the refusals themselves.
	IncludeRejected bool
	// conversions keeps conversions whatever Verb is: for the dump and the timeline, which show everything.
	conversions bool
}

func (f WriteFilter) match(ns string, w Write) bool {
	return ns == w.scope && f.fits(w)
}

// String renders the filter's set fields, e.g. "controller=shard verb=apply kind=Shard".
func (f WriteFilter) String() string {
	var parts []string
	for _, kv := range [][2]string{{"manager", f.Manager}, {"controller", f.Controller}, {"verb", string(f.Verb)}, {"kind", f.Kind}, {"name", f.Name}, {"subresource", f.Subresource}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since="+f.Since.Format("15:04:05.000"))
	}
	if f.IncludeRejected {
		parts = append(parts, "rejected included")
	}
	if len(parts) == 0 {
		return "any write"
	}
	return strings.Join(parts, " ")
}

// fits matches w against f's fields, whatever its namespace.
func (f WriteFilter) fits(w Write) bool {
	return (f.Name == "" || f.Name == w.Name) &&
		(f.Kind == "" || f.Kind == w.Kind) && (f.Manager == "" || f.Manager == w.Manager) &&
		(f.Controller == "" || f.Controller == w.Controller) && (f.Verb == "" || f.Verb == w.Verb) &&
		(f.Subresource == "" || f.Subresource == w.Subresource) && !w.Time.Before(f.Since) &&
		(f.IncludeRejected || w.Err == nil) && (w.Verb != VerbConvert || f.Verb == VerbConvert || f.conversions)
}

// writes returns the recorded writes in namespace ns that match f, oldest first (by Time: a write read from
// the audit log is recorded after writes that returned later).
func (r *recorder) writes(ns string, f WriteFilter) []Write {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Write
	for _, w := range r.writeLog {
		if f.match(ns, w) {
			out = append(out, w)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// sync records what kube-apiserver's audit log holds now, when the suite reads it.
func (r *recorder) sync() {
	if r.catchUp != nil {
		r.catchUp()
	}
}

// PassFilter selects a Case's reconcile passes; a zero string or time matches anything. Passes the gate
// refused are kept apart: Gated false selects the passes that reached a reconciler, true only the refused
// ones.
type PassFilter struct {
	Name, Manager, Controller string
	// Since keeps passes that started at or after this time.
	Since time.Time
	// Gated false keeps the passes that reached the reconciler; true keeps only the requests the gate refused.
	Gated bool
}

func (f PassFilter) match(ns string, p *Pass) bool {
	return ns == p.scope && (f.Name == "" || f.Name == p.Request.Name) &&
		(f.Manager == "" || f.Manager == p.Manager) && (f.Controller == "" || f.Controller == p.Controller) &&
		!p.Start.Before(f.Since) && f.Gated == p.Gated
}

// passes returns the recorded reconcile passes in namespace ns that match f, oldest first.
func (r *recorder) passes(ns string, f PassFilter) []Pass {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Pass
	for _, p := range r.passLog {
		if f.match(ns, p) {
			out = append(out, *p)
		}
	}
	return out
}

// allPasses returns every pass in namespace ns since t, gated or not, for dumps.
func (r *recorder) allPasses(ns string, since time.Time) []Pass {
	out := append(r.passes(ns, PassFilter{Since: since}), r.passes(ns, PassFilter{Since: since, Gated: true})...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// lastPassErrors returns, for every controller key in namespace ns whose latest finished pass returned an
// error, that pass, unless its manager instance was stopped or fenced before it ended (see cutByStop).
func (r *recorder) lastPassErrors(ns string) []Pass {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Pass
	for _, p := range r.lastPass {
		if p.scope == ns && !p.End.IsZero() && p.Err != nil && !r.cutByStop(p) {
			out = append(out, *p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// owedRequeue reports whether a controller key in namespace ns is owed a requeue since changed: its latest
// pass began before changed, ended without an error and asked for a RequeueAfter (after compression). due is
// the latest time such a requeue falls due (pass end plus its delay), which may be past when the queue or a
// busy machine runs it late.
func (r *recorder) owedRequeue(ns string, changed time.Time) (due time.Time, owed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.lastPass {
		if p.scope != ns || p.End.IsZero() || p.Err != nil || p.RequeueAfter <= 0 || !p.Start.Before(changed) || r.cutByStop(p) {
			continue
		}
		owed = true
		if d := p.End.Add(p.RequeueAfter); d.After(due) {
			due = d
		}
	}
	return due, owed
}

// cutByStop reports whether p's manager instance was stopped (or fenced by a restart point) before p
// ended: its error is then that stop's, a cancelled context or a refused write, not the operator giving up,
// and the key's next pass, if any, is another instance's (a follower that took over reconciles under its own
// manager's name). Called with r.mu held.
func (r *recorder) cutByStop(p *Pass) bool {
	if p.instance == nil {
		return false
	}
	t := p.instance.Load()
	return t != nil && !t.After(p.End)
}

// lastWrite returns the time of the latest write to namespace ns (zero when none), after reading the audit
// log to its end: the latest by Time, not the last recorded, leaving out leader election's Lease renewals (a
// manager's heartbeat, not a reaction to anything) and conversions (a read's).
func (r *recorder) lastWrite(ns string) time.Time {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest[ns]
}

// writers counts writes to namespace ns since t by writer and by object, for quiescence reports: those
// quiescence waits on (not quiet).
func (r *recorder) writers(ns string, since time.Time) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, w := range r.writeLog {
		if w.scope == ns && !w.Time.Before(since) && !w.quiet() {
			sub := ""
			if w.Subresource != "" {
				sub = "/" + w.Subresource
			}
			out[fmt.Sprintf("%s %s%s %s/%s", w.writer(), w.Verb, sub, w.Kind, w.Name)]++
		}
	}
	return out
}

type passCtxKey struct{}

// passFrom returns the pass a context belongs to, or nil outside a wrapped reconcile.
func passFrom(ctx context.Context) *Pass {
	p, _ := ctx.Value(passCtxKey{}).(*Pass)
	return p
}

// broadcast wakes every waiter when something was recorded (a condition variable usable in select).
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) signal() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}

func key(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// topN renders the n largest counts of m as "name (count)" lines, largest first.
func topN(m map[string]int, n int) []string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var out []string
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, fmt.Sprintf("%s (%d)", all[i].k, all[i].v))
	}
	return out
}

func indent(lines []string) string {
	if len(lines) == 0 {
		return "    (none)"
	}
	return "    " + strings.Join(lines, "\n    ")
}

// running counts the passes for namespace ns that started and have not ended.
func (r *recorder) running(ns string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.lastPass {
		if p.scope == ns && p.End.IsZero() {
			n++
		}
	}
	return n
}
