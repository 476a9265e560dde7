package suite

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Write is one write a controller (or a Case) attempted against the API server, successful or not.
type Write struct {
	// Seq orders writes across the whole suite, from 1.
	Seq int64
	// Time is when the call returned.
	Time time.Time
	// Manager and Controller name the writer: the ManagerOptions.Name and the name given to Wiring.Client.
	Manager, Controller string
	// Pass is the Pass.ID of the reconcile pass that made the write; 0 for a write made outside a pass
	// (a Case's own writes, a fake's timer).
	Pass int64
	// Verb is create, update, patch, apply, delete or deleteallof.
	Verb string
	// Subresource is "status" (or another subresource name) for a subresource write; empty otherwise.
	Subresource string
	// Kind is the object's kind, e.g. "Shard"; Namespace and Name its key (Name empty for deleteallof).
	Kind, Namespace, Name string
	// FieldOwner is the field manager the write named; empty when it named none (the API server then
	// derives one from the User-Agent).
	FieldOwner string
	// PatchType is the patch's content type for patch and apply (e.g. application/apply-patch+yaml).
	PatchType string
	// Err is the API server's answer for a rejected write; empty when the write succeeded.
	Err string
}

// Rejected reports whether the API server refused the write (conflict, validation, not found, ...).
func (w Write) Rejected() bool { return w.Err != "" }

// Writer is "manager/controller", the name a write is attributed to in reports.
func (w Write) Writer() string { return w.Manager + "/" + w.Controller }

// String renders the write on one line for reports and dumps.
func (w Write) String() string {
	sub := ""
	if w.Subresource != "" {
		sub = "/" + w.Subresource
	}
	s := fmt.Sprintf("#%d %s %s %s%s %s/%s pass=%d owner=%q", w.Seq, w.Time.Format("15:04:05.000"), w.Writer(), w.Verb, sub, w.Kind, key(w.Namespace, w.Name), w.Pass, w.FieldOwner)
	if w.Err != "" {
		s += " REJECTED: " + w.Err
	}
	return s
}

// Pass is one call of a wrapped reconciler: a reconcile pass, or a request the gate refused.
type Pass struct {
	// ID orders passes across the whole suite, from 1.
	ID int64
	// Manager and Controller name the reconciler (ManagerOptions.Name, the name given to Wiring.Reconciler).
	Manager, Controller string
	// Request is the reconcile request.
	Request ctrl.Request
	// N counts the passes of this controller for this request, from 1.
	N int
	// Start and End bound the pass; End is zero while it runs.
	Start, End time.Time
	// Gated is true when the gate refused the request: the real reconciler was not called.
	Gated bool
	// Err is the error the pass returned; empty when it returned none.
	Err string
	// RequeueAfter is the delay handed to controller-runtime (after requeue compression); Asked is the delay
	// the reconciler asked for. Both are zero when no delayed requeue was asked.
	RequeueAfter, Asked time.Duration
}

// String renders the pass on one line for reports and dumps.
func (p Pass) String() string {
	s := fmt.Sprintf("pass %d %s %s/%s %s n=%d", p.ID, p.Start.Format("15:04:05.000"), p.Manager, p.Controller, p.Request.NamespacedName, p.N)
	switch {
	case p.Gated:
		s += " GATED"
	case p.Err != "":
		s += " error: " + p.Err
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

// Recorder keeps every write and every reconcile pass of the suite, in order. It is safe for concurrent use;
// the queries return copies.
type Recorder struct {
	mu       sync.Mutex
	writes   []Write
	passes   []*Pass
	perKey   map[passKey]int
	lastPass map[passKey]*Pass
	notify   *broadcast
	scheme   *runtime.Scheme
}

func newRecorder(scheme *runtime.Scheme, notify *broadcast) *Recorder {
	return &Recorder{perKey: map[passKey]int{}, lastPass: map[passKey]*Pass{}, notify: notify, scheme: scheme}
}

func (r *Recorder) addWrite(w Write) {
	r.mu.Lock()
	w.Seq = int64(len(r.writes) + 1)
	r.writes = append(r.writes, w)
	r.mu.Unlock()
	r.notify.signal()
}

func (r *Recorder) beginPass(manager, controller string, req ctrl.Request) *Pass {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := passKey{manager, controller, req.NamespacedName}
	r.perKey[k]++
	p := &Pass{ID: int64(len(r.passes) + 1), Manager: manager, Controller: controller, Request: req, N: r.perKey[k], Start: time.Now()}
	r.passes = append(r.passes, p)
	r.lastPass[k] = p
	return p
}

func (r *Recorder) endPass(p *Pass, gated bool, err error, after, asked time.Duration) {
	r.mu.Lock()
	p.End = time.Now()
	p.Gated = gated
	if err != nil {
		p.Err = err.Error()
	}
	p.RequeueAfter, p.Asked = after, asked
	r.mu.Unlock()
	r.notify.signal()
}

// WriteFilter selects writes; a zero field matches anything.
type WriteFilter struct {
	Namespace, Name, Kind, Manager, Controller, Verb, Subresource string
	// Since keeps writes at or after this time.
	Since time.Time
}

func (f WriteFilter) match(w Write) bool {
	return (f.Namespace == "" || f.Namespace == w.Namespace) && (f.Name == "" || f.Name == w.Name) &&
		(f.Kind == "" || f.Kind == w.Kind) && (f.Manager == "" || f.Manager == w.Manager) &&
		(f.Controller == "" || f.Controller == w.Controller) && (f.Verb == "" || f.Verb == w.Verb) &&
		(f.Subresource == "" || f.Subresource == w.Subresource) && !w.Time.Before(f.Since)
}

// Writes returns the recorded writes that match f, oldest first.
func (r *Recorder) Writes(f WriteFilter) []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Write
	for _, w := range r.writes {
		if f.match(w) {
			out = append(out, w)
		}
	}
	return out
}

// PassFilter selects reconcile passes; a zero field matches anything.
type PassFilter struct {
	Namespace, Name, Manager, Controller string
	// Since keeps passes that started at or after this time.
	Since time.Time
	// Gated selects only gated requests (true) or only real passes (false); nil keeps both.
	Gated *bool
}

func (f PassFilter) match(p *Pass) bool {
	return (f.Namespace == "" || f.Namespace == p.Request.Namespace) && (f.Name == "" || f.Name == p.Request.Name) &&
		(f.Manager == "" || f.Manager == p.Manager) && (f.Controller == "" || f.Controller == p.Controller) &&
		!p.Start.Before(f.Since) && (f.Gated == nil || *f.Gated == p.Gated)
}

// Passes returns the recorded reconcile passes that match f, oldest first.
func (r *Recorder) Passes(f PassFilter) []Pass {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Pass
	for _, p := range r.passes {
		if f.match(p) {
			out = append(out, *p)
		}
	}
	return out
}

// lastPassErrors returns, for every controller key in namespace ns whose latest finished pass returned an
// error, that pass.
func (r *Recorder) lastPassErrors(ns string) []Pass {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Pass
	for k, p := range r.lastPass {
		if k.req.Namespace == ns && !p.End.IsZero() && p.Err != "" {
			out = append(out, *p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// lastWrite returns the time and index of the latest write to namespace ns (zero time and -1 when none).
func (r *Recorder) lastWrite(ns string) (time.Time, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.writes) - 1; i >= 0; i-- {
		if r.writes[i].Namespace == ns {
			return r.writes[i].Time, i
		}
	}
	return time.Time{}, -1
}

// writers counts writes to namespace ns since t by writer and by object, for quiescence reports.
func (r *Recorder) writers(ns string, since time.Time) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, w := range r.writes {
		if w.Namespace == ns && !w.Time.Before(since) {
			sub := ""
			if w.Subresource != "" {
				sub = "/" + w.Subresource
			}
			out[fmt.Sprintf("%s %s%s %s/%s", w.Writer(), w.Verb, sub, w.Kind, w.Name)]++
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
func (r *Recorder) running(ns string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, p := range r.lastPass {
		if k.req.Namespace == ns && p.End.IsZero() {
			n++
		}
	}
	return n
}
