package suite

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ensembletest/ensemble/internal/controlplane"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// fakeListWatch is an informer's ListerWatcher whose every watch is a FakeWatcher the test drives.
type fakeListWatch struct {
	mu      sync.Mutex
	watches []*watch.FakeWatcher
}

// List answers an empty list at resourceVersion 100.
func (f *fakeListWatch) List(metav1.ListOptions) (runtime.Object, error) {
	return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "100"}}, nil
}

// Watch opens a new FakeWatcher with room for 64 events, so the test can send without a reader.
func (f *fakeListWatch) Watch(metav1.ListOptions) (watch.Interface, error) {
	fw := watch.NewFakeWithChanSize(64, false)
	f.mu.Lock()
	f.watches = append(f.watches, fw)
	f.mu.Unlock()
	return fw, nil
}

// last is the FakeWatcher of the latest Watch.
func (f *fakeListWatch) last() *watch.FakeWatcher {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches[len(f.watches)-1]
}

// configMapKind is the ConfigMap's group (core) and kind, as a hold names it.
var configMapKind = schema.GroupKind{Kind: "ConfigMap"}

// heldListWatch builds holds and one informer of example's kind over a fakeListWatch, through wrapCache
// over an operator's own NewInformer (which only keeps the ListerWatcher it is handed).
func heldListWatch(t *testing.T, example runtime.Object) (*holds, toolscache.ListerWatcherWithContext, *fakeListWatch) {
	t.Helper()
	h := newHolds(newScheme())
	var got toolscache.ListerWatcher
	o := h.wrapCache(cache.Options{NewInformer: func(lw toolscache.ListerWatcher, _ runtime.Object, _ time.Duration, _ toolscache.Indexers) toolscache.SharedIndexInformer {
		got = lw
		return nil
	}})
	f := &fakeListWatch{}
	o.NewInformer(f, example, 0, nil)
	lw, ok := got.(*heldInformer)
	if !ok {
		t.Fatalf("the operator's NewInformer was handed %T, want the holds' ListerWatcher", got)
	}
	return h, lw, f
}

// cmAt is ConfigMap ns/name at resourceVersion rv with data.v = v.
func cmAt(name string, rv int, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: strconv.Itoa(rv)},
		Data: map[string]string{"v": v}}
}

// eventLine renders an event as "TYPE name rv v", or "BOOKMARK rv" (with the object's Go type and kind when
// withType), for comparing sequences.
func eventLine(ev watch.Event, withType bool) string {
	a, err := meta.Accessor(ev.Object)
	if err != nil {
		return fmt.Sprintf("%s %T", ev.Type, ev.Object)
	}
	if ev.Type == watch.Bookmark {
		if withType {
			return fmt.Sprintf("BOOKMARK %s %T %s", a.GetResourceVersion(), ev.Object, ev.Object.GetObjectKind().GroupVersionKind().Kind)
		}
		return "BOOKMARK " + a.GetResourceVersion()
	}
	v := ""
	if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
		v = cm.Data["v"]
	}
	return fmt.Sprintf("%s %s %s %s", ev.Type, a.GetName(), a.GetResourceVersion(), v)
}

// next reads n events of w as eventLine renders them; a watch that delivers fewer within patience fails the test.
func next(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	return nextTyped(t, w, n, false)
}

// nextTyped is next, with the Go type and kind of bookmarks when withType.
func nextTyped(t *testing.T, w watch.Interface, n int, withType bool) []string {
	t.Helper()
	var out []string
	for range n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch closed after %q", out)
			}
			out = append(out, eventLine(ev, withType))
		case <-time.After(patience):
			t.Fatalf("got %q, then nothing for %s", out, patience)
		}
	}
	return out
}

// watchFrom opens a watch on lw from resourceVersion rv (a continuation, not a relist).
func watchFrom(t *testing.T, lw toolscache.ListerWatcherWithContext, rv string) watch.Interface {
	t.Helper()
	w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// heldConfigMapWatch is heldListWatch's ConfigMap informer with a watch open from resourceVersion 0 and
// the FakeWatcher behind it; the watch is stopped and goroutines checked for leaks when the test ends.
func heldConfigMapWatch(t *testing.T) (*holds, watch.Interface, *watch.FakeWatcher) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	h, lw, f := heldListWatch(t, &corev1.ConfigMap{})
	w := watchFrom(t, lw, "0")
	t.Cleanup(w.Stop)
	return h, w, f.last()
}

// heldCount is how many events the informers of h hold now, read under h's lock.
func heldCount(h *holds) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, in := range h.informers {
		n += len(in.pending)
	}
	return n
}

// waitHeld waits until the informers of h hold n events: every event sent before has been read and kept,
// none is on its way to the informer.
func waitHeld(t *testing.T, h *holds, n int) {
	t.Helper()
	NewWithT(t).Eventually(heldCount).WithArguments(h).WithTimeout(patience).Should(Equal(n), "events held")
}

// nothingDelivered fails the test when w has an event ready for its reader.
func nothingDelivered(t *testing.T, w watch.Interface) {
	t.Helper()
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("the watch delivered %s during the hold", eventLine(ev, false))
	default:
	}
}

// TestHeldStreamOrder: a hold takes every event of its kind out of the stream, of every object and every
// namespace, bookmarks included, from the hold on; release delivers them in the order read, once, before
// what comes after it; a hold of another kind holds nothing here.
func TestHeldStreamOrder(t *testing.T) {
	h, w, fw := heldConfigMapWatch(t)
	g := NewWithT(t)
	other := h.hold(schema.GroupKind{Kind: "Secret"}, "ns", false)
	defer other()
	fw.Add(cmAt("a", 1, "1"))
	g.Expect(next(t, w, 1)).To(Equal([]string{"ADDED a 1 1"}), "a Secret hold holds ConfigMaps")
	release := h.hold(configMapKind, "ns", false)
	g.Expect(h.heldBy("ns")).To(Equal([]string{"ConfigMap", "Secret"}))
	g.Expect(h.heldBy("elsewhere")).To(BeEmpty())
	fw.Modify(cmAt("a", 2, "2"))
	fw.Add(cmAt("b", 3, "1"))
	fw.Action(watch.Bookmark, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "4"}})
	elsewhere := cmAt("c", 5, "1")
	elsewhere.Namespace = "elsewhere"
	fw.Add(elsewhere)
	fw.Modify(cmAt("b", 6, "2"))
	waitHeld(t, h, 5)
	nothingDelivered(t, w)
	release()
	release()
	fw.Modify(cmAt("a", 7, "3"))
	g.Expect(next(t, w, 6)).To(Equal([]string{"MODIFIED a 2 2", "ADDED b 3 1", "BOOKMARK 4", "ADDED c 5 1", "MODIFIED b 6 2", "MODIFIED a 7 3"}),
		"release delivers the held events in resourceVersion order, once, before what comes after it")
	g.Expect(h.heldBy("ns")).To(Equal([]string{"Secret"}))
	// Left unread: Stop must end the goroutine that would hand it over (goleak checks).
	fw.Modify(cmAt("c", 8, "2"))
}

// expiredEvent reports whether ev is the 410 Expired that makes a reflector relist.
func expiredEvent(ev watch.Event) bool {
	return ev.Type == watch.Error && apierrors.IsResourceExpired(apierrors.FromObject(ev.Object))
}

// TestHeldStreamCoalesceRelists: a coalescing release drops the held events and ends the informer's watch
// with 410 Expired, so its reflector relists; released between two watches, the next watch begins with it.
// The relist ends the expiry.
func TestHeldStreamCoalesceRelists(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	g := NewWithT(t)
	h, lw, f := heldListWatch(t, &corev1.ConfigMap{})
	w := watchFrom(t, lw, "0")
	defer w.Stop()
	release := h.hold(configMapKind, "ns", true)
	f.last().Modify(cmAt("a", 1, "1"))
	f.last().Modify(cmAt("a", 2, "2"))
	waitHeld(t, h, 2)
	release()
	select {
	case ev := <-w.ResultChan():
		g.Expect(expiredEvent(ev)).To(BeTrue(), "the watch delivered %s, want 410 Expired", eventLine(ev, false))
	case <-time.After(patience):
		t.Fatal("a coalescing release did not end the watch")
	}
	_, open := <-w.ResultChan()
	g.Expect(open).To(BeFalse(), "the watch goes on after its 410")
	g.Expect(heldCount(h)).To(BeZero())
	// The reflector relists.
	if _, err := lw.ListWithContext(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}

	// Released while no watch is open: the next watch (a restart, not a relist) says 410 at once.
	w2 := watchFrom(t, lw, "100")
	again := h.hold(configMapKind, "ns", true)
	f.last().Modify(cmAt("a", 3, "3"))
	waitHeld(t, h, 1)
	w2.Stop()
	again()
	w3 := watchFrom(t, lw, "100")
	defer w3.Stop()
	select {
	case ev := <-w3.ResultChan():
		g.Expect(expiredEvent(ev)).To(BeTrue(), "the next watch delivered %s, want 410 Expired", eventLine(ev, false))
	case <-time.After(patience):
		t.Fatal("the watch after a coalescing release did not end")
	}
	if _, err := lw.ListWithContext(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w4 := watchFrom(t, lw, "100")
	defer w4.Stop()
	f.last().Modify(cmAt("a", 101, "4"))
	g.Expect(next(t, w4, 1)).To(Equal([]string{"MODIFIED a 101 4"}), "after the relist the stream flows")
}

// TestHeldStreamNests: a kind held twice flows again only when both holds were released; a release called
// twice ends its own claim only; one hold that asked for every event makes the delivery ordered.
func TestHeldStreamNests(t *testing.T) {
	h, w, fw := heldConfigMapWatch(t)
	g := NewWithT(t)
	stale := h.hold(configMapKind, "ns", false)
	coalesce := h.hold(configMapKind, "other", true)
	fw.Modify(cmAt("a", 1, "1"))
	fw.Modify(cmAt("b", 2, "1"))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(stale)
	}
	wg.Wait()
	g.Expect(h.heldBy("ns")).To(BeEmpty())
	g.Expect(h.heldBy("other")).To(Equal([]string{"ConfigMap"}))
	fw.Modify(cmAt("b", 3, "2"))
	waitHeld(t, h, 3)
	nothingDelivered(t, w)
	coalesce()
	fw.Modify(cmAt("b", 4, "3"))
	g.Expect(next(t, w, 4)).To(Equal([]string{"MODIFIED a 1 1", "MODIFIED b 2 1", "MODIFIED b 3 2", "MODIFIED b 4 3"}))
}

// TestHeldStreamRelistAndRestart: events held by a watch the informer stopped are dropped when it relists (a
// list, or a watch that streams the initial state, whose initial events pass though the kind is held), and
// when it only restarts from its resourceVersion, which no held event reached: the API server sends them
// again, and the new watch holds them again or lets them flow, as the hold then stands. Stopping a watch that
// still has events to hand over leaves no goroutine.
func TestHeldStreamRelistAndRestart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	heldThenStopped := func(t *testing.T) (*holds, toolscache.ListerWatcherWithContext, *fakeListWatch, func()) {
		g := NewWithT(t)
		h, lw, f := heldListWatch(t, &corev1.ConfigMap{})
		w := watchFrom(t, lw, "0")
		f.last().Modify(cmAt("b", 1, "1"))
		g.Expect(next(t, w, 1)).To(Equal([]string{"MODIFIED b 1 1"}))
		release := h.hold(configMapKind, "ns", false)
		f.last().Modify(cmAt("a", 2, "1"))
		f.last().Modify(cmAt("b", 3, "2"))
		waitHeld(t, h, 2)
		w.Stop()
		_, open := <-w.ResultChan()
		g.Expect(open).To(BeFalse(), "a stopped watch's channel is closed")
		return h, lw, f, release
	}

	t.Run("list", func(t *testing.T) {
		g := NewWithT(t)
		h, lw, f, release := heldThenStopped(t)
		if _, err := lw.ListWithContext(t.Context(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		g.Expect(heldCount(h)).To(BeZero(), "a relist keeps the events held before it")
		w := watchFrom(t, lw, "100")
		defer w.Stop()
		release()
		f.last().Modify(cmAt("b", 101, "3"))
		g.Expect(next(t, w, 1)).To(Equal([]string{"MODIFIED b 101 3"}), "events held before a relist were delivered after it")
	})
	t.Run("watch-list", func(t *testing.T) {
		g := NewWithT(t)
		_, lw, f, release := heldThenStopped(t)
		w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		fw := f.last()
		fw.Add(cmAt("a", 2, "1"))
		fw.Add(cmAt("b", 3, "2"))
		end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "5", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		fw.Action(watch.Bookmark, end)
		fw.Modify(cmAt("a", 6, "2"))
		g.Expect(next(t, w, 3)).To(Equal([]string{"ADDED a 2 1", "ADDED b 3 2", "BOOKMARK 5"}),
			"the initial state passes though the kind is held")
		release()
		fw.Modify(cmAt("b", 7, "3"))
		g.Expect(next(t, w, 2)).To(Equal([]string{"MODIFIED a 6 2", "MODIFIED b 7 3"}),
			"the events held before the relist are dropped, the change after its initial state was held")
	})
	t.Run("restart while held", func(t *testing.T) {
		g := NewWithT(t)
		h, lw, f, release := heldThenStopped(t)
		w := watchFrom(t, lw, "1")
		defer w.Stop()
		g.Expect(heldCount(h)).To(BeZero(), "a restarted watch keeps the events the API server sends again")
		fw := f.last()
		fw.Modify(cmAt("a", 2, "1"))
		fw.Modify(cmAt("b", 3, "2"))
		fw.Modify(cmAt("b", 4, "3"))
		waitHeld(t, h, 3)
		release()
		g.Expect(next(t, w, 3)).To(Equal([]string{"MODIFIED a 2 1", "MODIFIED b 3 2", "MODIFIED b 4 3"}), "each held event once, in order")
	})
	t.Run("released between watches", func(t *testing.T) {
		g := NewWithT(t)
		_, lw, f, release := heldThenStopped(t)
		release()
		w := watchFrom(t, lw, "1")
		defer w.Stop()
		fw := f.last()
		fw.Modify(cmAt("a", 2, "1"))
		fw.Modify(cmAt("b", 3, "2"))
		g.Expect(next(t, w, 2)).To(Equal([]string{"MODIFIED a 2 1", "MODIFIED b 3 2"}), "the released events once, as the API server sends them again")
	})
}

// TestHeldStreamDynamicKinds: the kind of an unstructured or metadata-only informer comes from its example
// object, so a hold of that kind holds its stream.
func TestHeldStreamDynamicKinds(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(gvk)
	for _, example := range []client.Object{u, p} {
		t.Run(fmt.Sprintf("%T", example), func(t *testing.T) {
			h, lw, f := heldListWatch(t, example)
			w := watchFrom(t, lw, "0")
			defer w.Stop()
			obj := func(name string, rv int) runtime.Object {
				o := example.DeepCopyObject().(client.Object)
				o.SetNamespace("ns")
				o.SetName(name)
				o.SetResourceVersion(strconv.Itoa(rv))
				return o
			}
			release := h.hold(configMapKind, "ns", false)
			f.last().Modify(obj("a", 1))
			f.last().Modify(obj("b", 2))
			waitHeld(t, h, 2)
			nothingDelivered(t, w)
			release()
			NewWithT(t).Expect(next(t, w, 2)).To(Equal([]string{"MODIFIED a 1 ", "MODIFIED b 2 "}))
		})
	}
}

// TestHeldStreamIsTheWrittenGroupsKind: a stale point that fires on a write holds the stream of the written
// object's kind in its API group: of two kinds named Machine in different groups, both watched by the
// writer's manager, only the written group's Machines wait, and the other's flow.
func TestHeldStreamIsTheWrittenGroupsKind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := newHolds(newScheme())
	var lws []toolscache.ListerWatcher
	o := h.wrapCache(cache.Options{NewInformer: func(lw toolscache.ListerWatcher, _ runtime.Object, _ time.Duration, _ toolscache.Indexers) toolscache.SharedIndexInformer {
		lws = append(lws, lw)
		return nil
	}})
	const written, other = "cluster.x-k8s.io", "infrastructure.example.com"
	machine := func(group, name string, rv int) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: "v1beta1", Kind: "Machine"})
		u.SetNamespace("ns")
		u.SetName(name)
		if rv > 0 {
			u.SetResourceVersion(strconv.Itoa(rv))
		}
		return u
	}
	watches := map[string]watch.Interface{}
	fakes := map[string]*fakeListWatch{}
	for _, group := range []string{written, other} {
		fakes[group] = &fakeListWatch{}
		o.NewInformer(fakes[group], machine(group, "", 0), 0, nil)
		w := watchFrom(t, lws[len(lws)-1].(*heldInformer), "0")
		defer w.Stop()
		watches[group] = w
	}
	s := &Suite{managers: map[string]*Manager{"op": {Name: "op", holds: h}}}
	pl := s.planFor("ns", true)
	p, err := perturb.Parse("stale@op:Machine/a#1+1h")
	if err != nil {
		t.Fatal(err)
	}
	s.arm(pl, p)
	w := &Write{Manager: "op", Verb: VerbCreate, Kind: "Machine", Namespace: "ns", Name: "a", scope: "ns"}
	if f := s.perturbBefore(w, schema.GroupResource{Group: written, Resource: "machines"}); f.err != nil || w.Point != p.String() {
		t.Fatalf("the write: %v, point %q; want %s fired and the write sent", f.err, w.Point, p)
	}
	defer pl.pending.Wait()
	defer pl.releaseAll()
	g := NewWithT(t)
	fakes[written].last().Add(machine(written, "a", 1))
	fakes[other].last().Add(machine(other, "a", 2))
	g.Expect(next(t, watches[other], 1)).To(Equal([]string{"ADDED a 2 "}), "the other group's Machine is held")
	waitHeld(t, h, 1)
	nothingDelivered(t, watches[written])
	g.Expect(h.heldBy("ns")).To(Equal([]string{"Machine." + written}))
	pl.releaseAll()
	g.Expect(next(t, watches[written], 1)).To(Equal([]string{"ADDED a 1 "}))
	g.Expect(h.heldBy("ns")).To(BeEmpty())
}

// cmEvents records what one manager's ConfigMap informer hands its event handlers, per object name.
type cmEvents struct {
	mu sync.Mutex
	ns string
	by map[string][]string
}

func (e *cmEvents) add(o any, line string) {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok || cm.Namespace != e.ns {
		return
	}
	e.mu.Lock()
	e.by[cm.Name] = append(e.by[cm.Name], line)
	e.mu.Unlock()
}

// of returns the events seen for name, e.g. ["added 0", "updated 0->1", "deleted 1"].
func (e *cmEvents) of(name string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.by[name]...)
}

func (e *cmEvents) handler() toolscache.ResourceEventHandler {
	v := func(o any) string {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			return cm.Data["v"]
		}
		return "?"
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { e.add(o, "added "+v(o)) },
		UpdateFunc: func(old, o any) { e.add(o, "updated "+v(old)+"->"+v(o)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			e.add(o, "deleted "+v(o))
		},
	}
}

// TestHolds runs holds on a real manager's cache: while its ConfigMap stream is held the manager's cache and
// event handlers keep every ConfigMap's pre-hold state though the API server and the suite's stream have
// moved on; at release a stale hold delivers every update in order, and a coalescing one makes the informer
// relist, which hands one update per changed object and nothing for an object created and deleted meanwhile;
// holds nest.
func TestHolds(t *testing.T) {
	if _, err := controlplane.AssetsDir(); err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	s, err := Boot(t.Context(), Options{Scheme: newScheme(), WatchKinds: []client.Object{&corev1.ConfigMap{}},
		Pins: catalog{}, KubeControllers: []string{}, CleanupTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	c := s.NewCase(t)
	c.OptOut(Convergence, "the manager runs no controller: an event handler on its cache observes the holds")
	seen := &cmEvents{ns: c.Namespace, by: map[string][]string{}}
	m, err := s.StartManager(ManagerOptions{Name: "viewer", Register: func(_ context.Context, mgr manager.Manager) error {
		inf, err := mgr.GetCache().GetInformer(context.Background(), &corev1.ConfigMap{})
		if err != nil {
			return err
		}
		_, err = inf.AddEventHandler(seen.handler())
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	ctx := t.Context()
	g := NewWithT(t)
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: c.Namespace, Name: name} }
	value := func(r client.Reader, name string) string {
		cm := &corev1.ConfigMap{}
		if err := r.Get(ctx, key(name), cm); err != nil {
			return err.Error()
		}
		return cm.Data["v"]
	}
	set := func(name, v string) {
		t.Helper()
		cm := &corev1.ConfigMap{}
		g.Expect(s.Client.Get(ctx, key(name), cm)).To(Succeed())
		cm.Data = map[string]string{"v": v}
		g.Expect(s.Client.Update(ctx, cm)).To(Succeed())
	}
	// flow updates the free ConfigMap and waits for the manager's handler to see it: the watch delivers in
	// resourceVersion order, so every change written before has passed the holds by then.
	free := 0
	flow := func() {
		t.Helper()
		free++
		set("free", strconv.Itoa(free))
		g.Eventually(seen.of).WithArguments("free").WithTimeout(patience).Should(ContainElement(HaveSuffix(fmt.Sprintf("->%d", free))),
			"another ConfigMap's change did not reach the manager")
	}
	for _, name := range []string{"free", "stale", "coalesced"} {
		g.Expect(c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "0"}})).To(Succeed())
		g.Eventually(seen.of).WithArguments(name).WithTimeout(patience).Should(Equal([]string{"added 0"}))
	}
	reader := m.mgr.GetCache()
	// heldAtLeast waits until the manager's informers hold n events: the API server's watch delivered every
	// write before, and the manager's cache cannot have them.
	heldAtLeast := func(n int) {
		t.Helper()
		g.Eventually(heldCount).WithArguments(m.holds).WithTimeout(patience).Should(BeNumerically(">=", n), "events held")
	}

	for _, tc := range []struct {
		name     string
		coalesce bool
		want     []string
	}{
		{"stale", false, []string{"added 0", "updated 0->1", "updated 1->2", "updated 2->3"}},
		{"coalesced", true, []string{"added 0", "updated 0->3"}},
	} {
		release := m.holds.hold(configMapKind, c.Namespace, tc.coalesce)
		for v := 1; v <= 3; v++ {
			set(tc.name, strconv.Itoa(v))
		}
		free++
		set("free", strconv.Itoa(free))
		heldAtLeast(4)
		g.Expect(value(reader, tc.name)).To(Equal("0"), "%s: the manager's cache read past the hold", tc.name)
		g.Expect(value(reader, "free")).To(Equal(strconv.Itoa(free-1)), "%s: another ConfigMap's change passed the hold", tc.name)
		g.Expect(seen.of(tc.name)).To(Equal([]string{"added 0"}), "%s: a held change reached the manager's handler", tc.name)
		g.Expect(value(s.Client, tc.name)).To(Equal("3"), "%s: the API server", tc.name)
		// The suite's stream watches on its own: the hold is the manager's.
		g.Eventually(value).WithArguments(s.reader, tc.name).WithTimeout(patience).Should(Equal("3"), "%s: the suite's stream reader is held too", tc.name)
		g.Eventually(func() []Change { return c.Changes(ChangeFilter{Name: tc.name, Type: Modified}) }).WithTimeout(patience).Should(HaveLen(3), "%s: the stream's changes", tc.name)
		release()
		// A coalescing release relists after the reflector's backoff (about a second): wait for its result.
		g.Eventually(seen.of).WithArguments(tc.name).WithTimeout(patience).Should(Equal(tc.want), "%s: after release", tc.name)
		flow()
		g.Expect(seen.of(tc.name)).To(Equal(tc.want), "%s: after release", tc.name)
		g.Expect(value(reader, tc.name)).To(Equal("3"), "%s: the manager's cache after release", tc.name)
	}

	// Created and deleted while held with coalesce: the relist never shows it.
	ghost := m.holds.hold(configMapKind, c.Namespace, true)
	g.Expect(c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ghost"}, Data: map[string]string{"v": "0"}})).To(Succeed())
	g.Expect(s.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "ghost"}})).To(Succeed())
	heldAtLeast(2)
	g.Eventually(func() []Change { return c.Changes(ChangeFilter{Name: "ghost"}) }).WithTimeout(patience).Should(HaveLen(2), "the stream saw the ghost come and go")
	ghost()
	// free's change reaches the manager after the relist (the watch before it ended at the release).
	flow()
	g.Expect(seen.of("ghost")).To(BeEmpty(), "a coalesced create-then-delete reached the manager")
	g.Expect(apierrors.IsNotFound(reader.Get(ctx, key("ghost"), &corev1.ConfigMap{}))).To(BeTrue())

	// Nested holds: the stream flows again only when both were released, each release ending its own claim.
	outer := m.holds.hold(configMapKind, c.Namespace, false)
	inner := m.holds.hold(configMapKind, c.Namespace, true)
	set("stale", "4")
	inner()
	inner()
	heldAtLeast(1)
	g.Expect(value(reader, "stale")).To(Equal("3"), "one of two holds released: the stream flowed")
	outer()
	flow()
	g.Expect(value(reader, "stale")).To(Equal("4"))
	// The two relists handed stale unchanged ("updated 3->3"), as a relist hands every object.
	var changes []string
	for _, e := range seen.of("stale") {
		if old, now, ok := strings.Cut(strings.TrimPrefix(e, "updated "), "->"); !ok || old != now {
			changes = append(changes, e)
		}
	}
	g.Expect(changes).To(Equal([]string{"added 0", "updated 0->1", "updated 1->2", "updated 2->3", "updated 3->4"}))
}
