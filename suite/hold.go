package suite

import (
	"context"
	"reflect"
	"sync"
	"time"

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

// holds is one manager instance's set of held objects: the changes of a held object reach that manager's
// informers (its cache and its event handlers) only when the hold is released.
//
// Every informer the manager's cache builds lists and watches through a heldInformer, and each of its
// watches through a heldWatch that takes the events of held objects out of the stream. A relist of the
// informer (a list, or a watch that streams the initial state) shows the fresh state of every object, held
// or not, and drops the events held before it: delivering them afterwards would take the cache back. A
// watch that merely restarts from the informer's last resourceVersion (the reflector's watch timeout of 5 to
// 10 minutes) keeps them: the new watch will not send them again, so it delivers them at release.
type holds struct {
	scheme *runtime.Scheme
	// changed, when set, is asked about every event the watches read past the initial state; a change
	// trigger it returns fires on that event, before the informer gets it, and holds it when its mode holds
	// (see Suite.changeAt).
	changed func(k heldKey, ev watch.Event) *changeTrigger

	mu        sync.Mutex
	held      map[heldKey]*heldClaims
	informers []*heldInformer
}

// heldKey names one object of one kind (the kind as in the scheme, without group).
type heldKey struct{ kind, namespace, name string }

// heldClaims counts the holds on one object; ordered is set when one of them asked for every event rather
// than the net change, and then every event is delivered.
type heldClaims struct {
	n       int
	ordered bool
}

// newHolds returns an empty set of holds for a manager whose kinds scheme names.
func newHolds(scheme *runtime.Scheme) *holds {
	return &holds{scheme: scheme, held: map[heldKey]*heldClaims{}}
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
		return next(h.informer(lw, example, gvk), example, resync, idx)
	}
	return o
}

// informer wraps the ListerWatcher of one informer whose example object is example, of kind gvk.
func (h *holds) informer(lw toolscache.ListerWatcher, example runtime.Object, gvk schema.GroupVersionKind) *heldInformer {
	in := &heldInformer{h: h, inner: toolscache.ToListerWatcherWithContext(lw),
		noWatchList: watchlist.DoesClientNotSupportWatchListSemantics(lw),
		kind:        gvk.Kind, gvk: gvk, example: example, pending: map[heldKey][]watch.Event{}}
	h.mu.Lock()
	h.informers = append(h.informers, in)
	h.mu.Unlock()
	return in
}

// hold starts holding the watch events of kind/namespace/name (kind as in the scheme, e.g. "Pod", "Shard")
// from now on. With coalesce, only the net last held state is delivered at release (ADDED then DELETED
// nets to nothing; an object the informer already had and that was modified/deleted gets one MODIFIED or
// DELETED event); without, every held event is delivered in order. release delivers and ends the hold;
// safe to call more than once and concurrently; after release, events flow again. Holding an object
// already held returns a release that ends only the new hold's claim (holds nest: the object flows again
// when every hold on it was released). The held events are delivered coalesced only when every claim on
// the object asked for it.
func (h *holds) hold(kind, namespace, name string, coalesce bool) (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claim(heldKey{kind, namespace, name}, coalesce)
}

// heldIn returns the held objects of namespace ns.
func (h *holds) heldIn(ns string) []heldKey {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []heldKey
	for k := range h.held {
		if k.namespace == ns {
			out = append(out, k)
		}
	}
	return out
}

// claim adds one hold on k and returns its release (hold's). Called with h.mu held.
func (h *holds) claim(k heldKey, coalesce bool) (release func()) {
	c := h.held[k]
	if c == nil {
		c = &heldClaims{}
		h.held[k] = c
	}
	c.n++
	c.ordered = c.ordered || !coalesce
	var once sync.Once
	return func() { once.Do(func() { h.release(k) }) }
}

// release ends one claim on k; the last one hands every informer's held events of k to its current watch.
func (h *holds) release(k heldKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.held[k]
	if c.n--; c.n > 0 {
		return
	}
	delete(h.held, k)
	for _, in := range h.informers {
		evs, ok := in.pending[k]
		if !ok {
			continue
		}
		delete(in.pending, k)
		if !c.ordered {
			evs = netChange(evs)
		}
		if len(evs) == 0 {
			continue
		}
		in.ready = append(in.ready, evs...)
		if b, ok := in.bookmark(); ok {
			in.ready = append(in.ready, b)
		}
		if in.current != nil {
			select {
			case in.current.wake <- struct{}{}:
			default:
			}
		}
	}
}

// netChange is the one event that takes an informer from its state before evs to the state after them:
// none when the object was added and deleted again, ADDED when it was new, DELETED when it went, else
// MODIFIED with the last state.
func netChange(evs []watch.Event) []watch.Event {
	had := evs[0].Type != watch.Added
	last := evs[len(evs)-1]
	switch {
	case last.Type == watch.Deleted && !had:
		return nil
	case last.Type == watch.Deleted:
		return []watch.Event{last}
	case had:
		return []watch.Event{{Type: watch.Modified, Object: last.Object}}
	default:
		return []watch.Event{{Type: watch.Added, Object: last.Object}}
	}
}

// heldInformer is the ListerWatcher one informer of the manager's cache lists and watches through: it keeps
// the events its watches took out of their streams (pending, by object) and the released ones its current
// watch has not delivered yet (ready).
type heldInformer struct {
	h           *holds
	inner       toolscache.ListerWatcherWithContext
	noWatchList bool
	kind        string
	gvk         schema.GroupVersionKind
	example     runtime.Object

	// Guarded by h.mu. epoch counts relists; lastRV is the newest resourceVersion read from the API server
	// since the last one; current is the watch the informer reads now (nil between watches); since is when
	// its first watch opened (what it delivers as changes begins then).
	pending map[heldKey][]watch.Event
	ready   []watch.Event
	epoch   int
	lastRV  string
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
	if la, err := meta.ListAccessor(list); err == nil {
		in.lastRV = la.GetResourceVersion()
	}
	in.h.mu.Unlock()
	return list, nil
}

// WatchWithContext opens the wrapped watch and returns it behind a heldWatch, which becomes the informer's
// current watch. A watch that streams the initial state (SendInitialEvents) is a relist, as List is.
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

// relisted drops what was held or released before a relist. Called with h.mu held.
func (in *heldInformer) relisted() {
	in.pending = map[heldKey][]watch.Event{}
	in.ready = nil
	in.epoch++
	in.lastRV = ""
}

// bookmark is a BOOKMARK event at the newest resourceVersion read, delivered after released events so the
// reflector resumes from there and not from the older resourceVersion of the last released event. false
// when there is none to give. Called with h.mu held.
func (in *heldInformer) bookmark() (watch.Event, bool) {
	t := reflect.TypeOf(in.example)
	if in.lastRV == "" || t == nil || t.Kind() != reflect.Pointer {
		return watch.Event{}, false
	}
	obj, ok := reflect.New(t.Elem()).Interface().(runtime.Object)
	if !ok {
		return watch.Event{}, false
	}
	a, err := meta.Accessor(obj)
	if err != nil {
		return watch.Event{}, false
	}
	obj.GetObjectKind().SetGroupVersionKind(in.gvk)
	a.SetResourceVersion(in.lastRV)
	return watch.Event{Type: watch.Bookmark, Object: obj}, true
}

// heldWatch is the watch.Interface an informer reads: the wrapped watch's events in order, less those of
// held objects, with released events delivered before the next one. Its goroutine ends on Stop or when the
// wrapped watch ends.
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
// stay with the informer for its next watch. Safe to call more than once.
func (w *heldWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.inner.Stop()
	})
	<-w.done
}

// run forwards the wrapped watch's events until Stop or the wrapped watch's end.
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

// take records ev's resourceVersion and keeps ev when it is an event of a held object; it reports whether
// ev passes. A change trigger that fires on ev (holds.changed) is carried out once h.mu is released and
// before ev reaches the informer; one that holds holds ev itself.
func (w *heldWatch) take(ev watch.Event) bool {
	pass, fired, release := w.takeLocked(ev)
	if fired != nil {
		fired.fire(release)
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
		// Initial events come in no resourceVersion order; the end bookmark carries the list's.
		if ev.Type == watch.Bookmark && a.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
			w.initial = false
			in.lastRV = a.GetResourceVersion()
		}
		return true, nil, nil
	}
	in.lastRV = a.GetResourceVersion()
	if ev.Type == watch.Bookmark {
		return true, nil, nil
	}
	k := heldKey{in.kind, a.GetNamespace(), a.GetName()}
	if in.h.changed != nil {
		if fired = in.h.changed(k, ev); fired != nil && fired.holds() {
			release = in.h.claim(k, fired.coalesce())
		}
	}
	if in.h.held[k] == nil {
		return true, fired, nil
	}
	for _, p := range in.pending[k] {
		// A watch restarted from an older resourceVersion sends again what the last one held.
		if pa, err := meta.Accessor(p.Object); err == nil && p.Type == ev.Type && pa.GetResourceVersion() == a.GetResourceVersion() {
			return false, fired, release
		}
	}
	in.pending[k] = append(in.pending[k], ev)
	return false, fired, release
}

// flush delivers the informer's released events while w is its current watch; false when w was stopped.
// An event leaves ready only once delivered, so one a stopped watch could not deliver stays for the next.
func (w *heldWatch) flush() bool {
	in := w.in
	for {
		in.h.mu.Lock()
		if in.current != w || w.initial || len(in.ready) == 0 {
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
