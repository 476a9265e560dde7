package suite

import (
	"context"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// holds is one manager instance's set of held watch streams, by kind (its API group and kind: two groups'
// kinds of one name are two streams). While a kind is held, every event the manager's informers of that kind
// read from the API server (of every object of the kind, in every namespace, and every bookmark) waits in
// the order it was read, so that manager's view of the kind lags as
// a whole, as behind a slow watch: its informers' resourceVersion stays where the hold began, and what they
// are handed later comes in resourceVersion order.
//
// Every informer the manager's cache builds lists and watches through a heldInformer, and each of its
// watches through a heldWatch that takes the events out of the stream while the informer's kind is held. A
// stale release hands the held events to the informer's current watch, in order. A coalescing release makes
// the informer relist: its watch ends with 410 Expired, as a watch whose resourceVersion the API server
// compacted, and the reflector lists again, so the informer gets the net state of every object of the kind
// at once. A relist of the informer (a list, or a watch that streams the initial state) shows the fresh state
// of every object and drops the events held before it: delivering them afterwards would take the cache back.
// A watch that merely restarts (the reflector's watch timeout of 5 to 10 minutes, or an error) resumes from
// the informer's resourceVersion, before every held event, so the API server sends them again: the
// informer drops those it kept, and the new watch's are held again or flow, as the hold then stands.
type holds struct {
	scheme *runtime.Scheme
	// changed, when set, is asked about every event the watches read past the initial state; a change
	// trigger it returns fires on that event, before the informer gets it, and holds its kind from that
	// event on when its mode holds (see Suite.changeAt).
	changed func(k heldKey, ev watch.Event) *changeTrigger

	mu        sync.Mutex
	held      map[schema.GroupKind]*heldClaims
	informers []*heldInformer
}

// heldKey names one object of one kind (the kind as in the scheme, without group): what a change trigger
// counts the changes of.
type heldKey struct{ kind, namespace, name string }

// heldClaims counts the holds on one kind by the namespace of the case whose point made each; ordered is set
// when one of them asked for every event rather than a relist, and then every event is delivered.
type heldClaims struct {
	by      map[string]int
	ordered bool
}

// newHolds returns an empty set of holds for a manager whose kinds scheme names.
func newHolds(scheme *runtime.Scheme) *holds {
	return &holds{scheme: scheme, held: map[schema.GroupKind]*heldClaims{}}
}

// wrapCache returns o with NewInformer set so every informer the manager's cache builds watches through h
// (wrapping o.NewInformer when the operator set one, else toolscache.NewSharedIndexInformer).
func (h *holds) wrapCache(o cache.Options) cache.Options {
	next := o.NewInformer
	if next == nil {
		next = toolscache.NewSharedIndexInformer
	}
	o.NewInformer = func(lw toolscache.ListerWatcher, example runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		var gvk schema.GroupVersionKind
		if example != nil {
			var err error
			if gvk, err = apiutil.GVKForObject(example, h.scheme); err != nil {
				gvk = example.GetObjectKind().GroupVersionKind()
			}
		}
		if gvk.Kind == "" {
			// A kind nobody can name is one nobody can hold: its informer watches unwrapped.
			return next(lw, example, resync, idx)
		}
		return next(h.informer(lw, gvk), example, resync, idx)
	}
	return o
}

// informer wraps the ListerWatcher of one informer of kind gvk.
func (h *holds) informer(lw toolscache.ListerWatcher, gvk schema.GroupVersionKind) *heldInformer {
	in := &heldInformer{h: h, inner: toolscache.ToListerWatcherWithContext(lw),
		noWatchList: watchlist.DoesClientNotSupportWatchListSemantics(lw), kind: gvk.GroupKind()}
	h.mu.Lock()
	h.informers = append(h.informers, in)
	h.mu.Unlock()
	return in
}

// hold starts holding the watch stream of kind (its group and kind as in the scheme, e.g. {"", "Pod"},
// {"example.com", "Shard"}; a kind of the same name in another group is not held) in every informer of
// the manager from now on, for a point of the case in namespace ns (which heldBy reports). Without coalesce
// the release delivers every held event in the order read; with it, the informers relist (the held events
// are dropped and each informer gets the net state of every object: an object added and deleted while held
// never shows, one modified shows once, in its last state). release delivers and ends the hold; safe to call
// more than once and concurrently; after release, events flow again. Holding a kind already held returns a
// release that ends only the new hold's claim (holds nest: the stream flows again when every hold on it was
// released), and the informers relist only when every claim on the kind asked for coalesce.
func (h *holds) hold(kind schema.GroupKind, ns string, coalesce bool) (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claim(kind, ns, coalesce)
}

// heldBy returns the kinds held by points of the case in namespace ns ("Kind.group", "Kind" for the core
// group), sorted.
func (h *holds) heldBy(ns string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for kind, c := range h.held {
		if c.by[ns] > 0 {
			out = append(out, kind.String())
		}
	}
	sort.Strings(out)
	return out
}

// claim adds one hold on kind for namespace ns and returns its release (hold's). Called with h.mu held.
func (h *holds) claim(kind schema.GroupKind, ns string, coalesce bool) (release func()) {
	c := h.held[kind]
	if c == nil {
		c = &heldClaims{by: map[string]int{}}
		h.held[kind] = c
	}
	c.by[ns]++
	c.ordered = c.ordered || !coalesce
	var once sync.Once
	return func() { once.Do(func() { h.release(kind, ns) }) }
}

// release ends one claim on kind by namespace ns; the last one hands every informer's held events of the
// kind to its current watch, or makes the informer relist.
func (h *holds) release(kind schema.GroupKind, ns string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.held[kind]
	if c.by[ns]--; c.by[ns] == 0 {
		delete(c.by, ns)
	}
	if len(c.by) > 0 {
		return
	}
	delete(h.held, kind)
	for _, in := range h.informers {
		if in.kind != kind {
			continue
		}
		if c.ordered {
			in.ready = append(in.ready, in.pending...)
			in.pending = nil
		} else {
			in.drop()
			in.expire = true
		}
		if in.current != nil {
			select {
			case in.current.wake <- struct{}{}:
			default:
			}
		}
	}
}

// heldInformer is the ListerWatcher one informer of the manager's cache lists and watches through: it keeps
// the events its watches took out of their streams while its kind was held (pending, in the order read) and
// the released ones its current watch has not delivered yet (ready).
type heldInformer struct {
	h           *holds
	inner       toolscache.ListerWatcherWithContext
	noWatchList bool
	kind        schema.GroupKind

	// Guarded by h.mu. epoch counts drops of pending and ready (a relist, a restarted watch); expire is set by
	// a coalescing release until a watch of the informer ended with 410 Expired (or it relisted); current is
	// the watch the informer reads now (nil between watches); since is when its first watch opened (what it
	// delivers as changes begins then).
	pending []watch.Event
	ready   []watch.Event
	epoch   int
	expire  bool
	current *heldWatch
	since   time.Time
}

// List lists as the wrapped ListerWatcher does; see ListWithContext.
func (in *heldInformer) List(opts metav1.ListOptions) (runtime.Object, error) {
	return in.ListWithContext(context.Background(), opts)
}

// Watch watches as the wrapped ListerWatcher does; see WatchWithContext.
func (in *heldInformer) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return in.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists through the wrapped ListerWatcher. A list is a relist: the informer gets the fresh
// state, so the events held before it are dropped.
func (in *heldInformer) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := in.inner.ListWithContext(ctx, opts)
	if err != nil {
		return list, err
	}
	in.h.mu.Lock()
	in.relisted()
	in.h.mu.Unlock()
	return list, nil
}

// WatchWithContext opens the wrapped watch and returns it behind a heldWatch, which becomes the informer's
// current watch. A watch that streams the initial state (SendInitialEvents) is a relist, as List is; any
// other resumes from the informer's resourceVersion, which no held event reached, so the API server sends
// the held events again and the informer drops its own.
func (in *heldInformer) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	iw, err := in.inner.WatchWithContext(ctx, opts)
	if err != nil || iw == nil {
		return iw, err
	}
	w := &heldWatch{in: in, inner: iw, initial: opts.SendInitialEvents != nil && *opts.SendInitialEvents,
		out: make(chan watch.Event), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	in.h.mu.Lock()
	if w.initial {
		in.relisted()
	} else {
		in.drop()
	}
	if in.since.IsZero() {
		in.since = time.Now()
	}
	in.current = w
	in.h.mu.Unlock()
	go w.run()
	return w, nil
}

// IsWatchListSemanticsUnSupported answers as the wrapped ListerWatcher does, so the reflector streams the
// initial state exactly when it would without the wrapper.
func (in *heldInformer) IsWatchListSemanticsUnSupported() bool { return in.noWatchList }

// relisted drops what was held or released before a relist, which is also the relist a coalescing release
// asked for. Called with h.mu held.
func (in *heldInformer) relisted() {
	in.drop()
	in.expire = false
}

// drop forgets the held and released events not delivered yet. Called with h.mu held.
func (in *heldInformer) drop() {
	in.pending = nil
	in.ready = nil
	in.epoch++
}

// expired is the event that ends a watch whose resourceVersion the API server no longer has: the reflector
// answers it with a relist.
func expired(kind schema.GroupKind) watch.Event {
	st := apierrors.NewResourceExpired("the watch of " + kind.String() + " was released by a coalescing point: relist").Status()
	return watch.Event{Type: watch.Error, Object: &st}
}

// heldWatch is the watch.Interface an informer reads: the wrapped watch's events in order while its kind is
// not held, with released events delivered before the next one. Its goroutine ends on Stop, when the wrapped
// watch ends, or once it handed the informer the 410 of a coalescing release.
type heldWatch struct {
	in    *heldInformer
	inner watch.Interface
	out   chan watch.Event
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// initial is true while a watch that streams the initial state has not sent its end bookmark: those
	// events pass unheld, as a list's items do. Only the goroutine touches it.
	initial bool
}

// ResultChan is the channel of events the informer reads; it is closed when the watch ends.
func (w *heldWatch) ResultChan() <-chan watch.Event { return w.out }

// Stop stops the wrapped watch and waits for the goroutine to end. Released events it had not delivered
// stay with the informer until its next watch opens. Safe to call more than once.
func (w *heldWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.inner.Stop()
	})
	<-w.done
}

// run forwards the wrapped watch's events until Stop, the wrapped watch's end or a coalescing release.
func (w *heldWatch) run() {
	defer close(w.done)
	defer close(w.out)
	defer w.detach()
	for {
		if !w.flush() {
			return
		}
		select {
		case <-w.stop:
			return
		case <-w.wake:
		case ev, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			// Released events go out before the next event read after the release.
			if w.take(ev) && (!w.flush() || !w.send(ev)) {
				return
			}
		}
	}
}

// take keeps ev when the informer's kind is held; it reports whether ev passes. A change trigger that fires
// on ev (holds.changed) is carried out once h.mu is released and before ev reaches the informer; one that
// holds holds ev itself and every event after it.
func (w *heldWatch) take(ev watch.Event) bool {
	pass, fired, release := w.takeLocked(ev)
	if fired != nil {
		fired.fire(w.in.kind, release)
	}
	return pass
}

func (w *heldWatch) takeLocked(ev watch.Event) (pass bool, fired *changeTrigger, release func()) {
	if ev.Type == watch.Error {
		return true, nil, nil
	}
	a, err := meta.Accessor(ev.Object)
	if err != nil {
		return true, nil, nil
	}
	in := w.in
	in.h.mu.Lock()
	defer in.h.mu.Unlock()
	if w.initial {
		// Initial events come in no resourceVersion order, as a list's items; the end bookmark ends them.
		if ev.Type == watch.Bookmark && a.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
			w.initial = false
		}
		return true, nil, nil
	}
	if ev.Type != watch.Bookmark && in.h.changed != nil {
		k := heldKey{in.kind.Kind, a.GetNamespace(), a.GetName()}
		if fired = in.h.changed(k, ev); fired != nil && fired.holds() {
			release = in.h.claim(in.kind, fired.pl.ns, fired.coalesce())
		}
	}
	if in.h.held[in.kind] == nil {
		return true, fired, release
	}
	// A bookmark is held too: it would carry the informer's resourceVersion past the held events.
	in.pending = append(in.pending, ev)
	return false, fired, release
}

// flush delivers the informer's released events while w is its current watch, or ends w with 410 Expired
// after a coalescing release; false when w was stopped or ended. An event leaves ready only once delivered,
// so one a stopped watch could not deliver stays until the informer's next watch opens.
func (w *heldWatch) flush() bool {
	in := w.in
	for {
		in.h.mu.Lock()
		if in.current != w || w.initial {
			in.h.mu.Unlock()
			return true
		}
		if in.expire {
			in.h.mu.Unlock()
			// The reflector stops the watch and relists; the relist clears expire.
			w.send(expired(in.kind))
			return false
		}
		if len(in.ready) == 0 {
			in.h.mu.Unlock()
			return true
		}
		ev, epoch := in.ready[0], in.epoch
		in.h.mu.Unlock()
		if !w.send(ev) {
			return false
		}
		in.h.mu.Lock()
		if in.epoch == epoch && len(in.ready) > 0 {
			in.ready = in.ready[1:]
		}
		in.h.mu.Unlock()
	}
}

// send hands ev to the informer; false when w was stopped first.
func (w *heldWatch) send(ev watch.Event) bool {
	select {
	case w.out <- ev:
		return true
	case <-w.stop:
		return false
	}
}

// detach ends w's turn as the informer's current watch.
func (w *heldWatch) detach() {
	w.in.h.mu.Lock()
	if w.in.current == w {
		w.in.current = nil
	}
	w.in.h.mu.Unlock()
}
