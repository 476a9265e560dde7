package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// TB is what a Case needs of the test: satisfied by *testing.T and by Ginkgo's GinkgoT(). The Case's
// client calls run on Context, so they end with the test.
type TB interface {
	Context() context.Context
	Helper()
	Name() string
	Cleanup(func())
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
}

// Case is one spec's world: a fresh namespace admitted at the gate, a client whose writes are recorded
// as "case/spec" under the field manager CaseFieldManager, and a cleanup (registered with t.Cleanup) that dumps the namespace when the spec failed,
// deletes what the spec left behind while the controllers can still release their finalizers, and closes
// the gate again.
type Case struct {
	// Namespace is the case's namespace, "e-<spec name>-<5 hex>" (at most 63 characters).
	Namespace string
	// Client writes through the recorder as manager "case", controller "spec", field manager
	// CaseFieldManager; reads are uncached.
	Client client.Client
	// Started is when the case was created.
	Started time.Time

	t TB
	// ctx is t.Context(), taken once: under Ginkgo each call of GinkgoT().Context() makes a new context and
	// registers a DeferCleanup, which piled one up per Get of a poll and failed a Ctrl-C'd spec with
	// "DeferCleanup cannot be called in a DeferCleanup callback".
	ctx        context.Context
	s          *Suite
	mu         sync.Mutex
	invariants []*invariant
	scripts    []*Script
	optOuts    map[Oracle]string
	// sharedOK and differOK are the fields AllowSharedField and AllowDifference declared.
	sharedOK, differOK []fieldAllowance
	admitted           bool
	after              []func()
	// marks are the failures noted for the case's timeline (see mark).
	marks []mark
	// run is which run of its spec the case belongs to (Suite.beginRun), from 1; 0 outside a test.
	run int
}

// CaseOption changes how NewCase sets a case up.
type CaseOption func(*Case)

// Unadmitted leaves the case's namespace closed at the gate: gated managers never reconcile in it. For a
// spec that runs its own (ungated) operator instance in the namespace, which a gated instance of the same
// operator would otherwise fight.
func Unadmitted() CaseOption { return func(c *Case) { c.admitted = false } }

// AfterCleanup registers fn to run after the case's cleanup has emptied its namespace: stop there an
// operator instance the spec started, which must stay up while its objects' finalizers are released.
// Functions run last registered first.
func (c *Case) AfterCleanup(fn func()) {
	c.mu.Lock()
	c.after = append(c.after, fn)
	c.mu.Unlock()
}

var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// NewCase creates the case's namespace, admits it at the gate (unless Unadmitted) and registers the
// cleanup. A failure to create the namespace fails the test (t.Fatalf).
func (s *Suite) NewCase(t TB, opts ...CaseOption) *Case {
	t.Helper()
	if err := s.broken(); err != nil {
		t.Fatalf("%v", err)
	}
	name := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 40 {
		name = strings.Trim(name[:40], "-")
	}
	// ENSEMBLE_PERTURB's points are set on the cases of specs; a case made outside a test (a suite node's,
	// such as a sentinel's) has no spec to judge it and keeps the interleaving it has.
	var (
		run    int
		points []perturb.Point
		c      *Case
	)
	if t.Name() != "" {
		var err error
		run, points, err = s.beginRun(t.Name())
		// Registered first, so it runs after the case's cleanup; a case never made ends its run too.
		t.Cleanup(func() { s.endRun(t.Name(), c) })
		if err != nil {
			t.Fatalf("%v", err)
		}
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	ns := "e-" + name + "-" + hex.EncodeToString(b)[:5]
	cl, err := s.recordedClient(writer{manager: caseManager, controller: "spec", caseNS: ns})
	if err != nil {
		t.Fatalf("suite: a client for case %s: %v", ns, err)
	}
	c = &Case{Namespace: ns, t: t, ctx: t.Context(), s: s, Started: time.Now(), Client: client.WithFieldOwner(cl, CaseFieldManager), admitted: true, run: run}
	for _, o := range opts {
		o(c)
	}
	if err := s.Client.Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatalf("suite: creating namespace %s: %v", ns, err)
	}
	if c.admitted {
		s.gate.admit(ns)
	}
	for _, p := range points {
		s.arm(s.planFor(ns, true), p)
	}
	t.Cleanup(c.cleanup)
	return c
}

// Create creates obj in the case's namespace (set when obj has none). Errors: the API server's.
func (c *Case) Create(obj client.Object) error {
	if obj.GetNamespace() == "" && c.namespaced(obj) {
		obj.SetNamespace(c.Namespace)
	}
	return c.hint(c.Client.Create(c.ctx, obj))
}

// Get reads the named object of the case's namespace (or, for a cluster-scoped kind, the object of that
// name) into obj. Errors: the API server's (NotFound, ...).
func (c *Case) Get(name string, obj client.Object) error {
	key := client.ObjectKey{Namespace: c.Namespace, Name: name}
	if !c.namespaced(obj) {
		key.Namespace = ""
	}
	return c.hint(c.Client.Get(c.ctx, key, obj))
}

// List lists objects of the case's namespace into list; for a cluster-scoped kind, the objects the case
// claimed (see "Cluster-scoped objects" in docs/architecture.md), so a spec never sees another spec's.
// Errors: the API server's.
func (c *Case) List(list client.ObjectList, opts ...client.ListOption) error {
	if ok, err := c.s.Client.IsObjectNamespaced(list); err == nil && !ok {
		if err := c.Client.List(c.ctx, list, opts...); err != nil {
			return c.hint(err)
		}
		gvk, _ := apiutil.GVKForObject(list, c.s.scheme)
		kind := strings.TrimSuffix(gvk.Kind, "List")
		return meta.SetList(list, slices.DeleteFunc(mustExtractList(list), func(o runtime.Object) bool {
			a, err := meta.Accessor(o)
			return err != nil || c.s.rec.scopes.of(kind, "", a.GetName()) != c.Namespace
		}))
	}
	return c.hint(c.Client.List(c.ctx, list, append([]client.ListOption{client.InNamespace(c.Namespace)}, opts...)...))
}

// mustExtractList returns the items of a list the API server filled (never an error for one).
func mustExtractList(list client.ObjectList) []runtime.Object {
	items, _ := meta.ExtractList(list)
	return items
}

// Update reads the named object into obj, applies mutate and writes it back, retrying on conflict
// (at most 10 times). Errors: the API server's, or the last conflict.
func (c *Case) Update(name string, obj client.Object, mutate func()) error {
	var err error
	for i := 0; i < 10; i++ {
		if err = c.Get(name, obj); err != nil {
			return err
		}
		mutate()
		if err = c.Client.Update(c.ctx, obj); !apierrors.IsConflict(err) {
			return c.hint(err)
		}
	}
	return err
}

// Delete deletes obj (namespace set to the case's when empty); NotFound is not an error.
func (c *Case) Delete(obj client.Object, opts ...client.DeleteOption) error {
	if obj.GetNamespace() == "" && c.namespaced(obj) {
		obj.SetNamespace(c.Namespace)
	}
	return c.hint(client.IgnoreNotFound(c.Client.Delete(c.ctx, obj, opts...)))
}

// RequireQuiescent fails the test unless the case's namespace goes quiet for window within timeout, and
// returns how long that took (about zero when it had already been quiet for window). See Quiescent.
func (c *Case) RequireQuiescent(window, timeout time.Duration, opts ...QuietOption) time.Duration {
	c.t.Helper()
	took, err := c.Quiescent(window, timeout, opts...)
	if err != nil {
		c.mark("RequireQuiescent: " + err.Error())
		c.t.Fatalf("%v", err)
	}
	return took
}

// Quiescent waits until the case's namespace has been quiet for window (counted from the case's start at
// the earliest), within timeout, and returns how long it waited. It first releases the case's held points
// that last until the namespace is quiet (perturb.Point with neither For nor Lag) and waits for those with a
// Lag to end (outside timeout); the window then counts from that release, so it sees the operators'
// reaction. Quiet means no watched object changed, no
// write was attempted (see StateOnly) and no reconcile pass ran for window; then the last pass of every
// controller key in the namespace must not have ended in an error (one its manager's stop cut short does not
// count). Errors: not quiet in time (naming the
// busiest objects, their field transitions and the writers), a hot loop (see HotLoop; the wait ends at it
// unless the case opted out), quiet but a last pass failed (naming it), a
// window that is not positive or longer than timeout, an interrupted run. For a pin whose defect is that
// the namespace never goes quiet; a spec asserts with RequireQuiescent.
func (c *Case) Quiescent(window, timeout time.Duration, opts ...QuietOption) (time.Duration, error) {
	// A held point that lasts until the namespace is quiet ends now: otherwise its release and the
	// operators' reaction to what it held race the spec's own window, and the reaction lands in the spec's
	// next step.
	since := c.Started
	if released := c.releaseUntilQuiet(c.ctx); released.After(since) {
		since = released
	}
	if !c.optedOut(HotLoop) {
		opts = append(opts, func(q *quietConfig) { q.hotLoops = true })
	}
	return c.s.waitQuiescent(c.ctx, c.Namespace, since, window, timeout, opts...)
}

// Writes returns the recorded writes in the case's namespace that match f, oldest first.
func (c *Case) Writes(f WriteFilter) []Write { return c.s.rec.writes(c.Namespace, f) }

// Passes returns the recorded reconcile passes in the case's namespace that match f, oldest first.
func (c *Case) Passes(f PassFilter) []Pass { return c.s.rec.passes(c.Namespace, f) }

// Reader reads the watched kinds from the event stream's informer cache: the objects as the stream has seen
// them, without a round trip to the API server (for polling that must not load it). Reading a kind that is
// not in Options.WatchKinds starts an informer for it.
func (c *Case) Reader() client.Reader { return c.s.reader }

// Changes returns the observed changes in the case's namespace that match f, ordered by resourceVersion.
func (c *Case) Changes(f ChangeFilter) []Change { return c.s.stream.changes(c.Namespace, f) }

// fatalf marks and fails the test with a harness verdict.
func (c *Case) fatalf(format string, args ...any) {
	c.t.Helper()
	msg := fmt.Sprintf(format, args...)
	first, _, _ := strings.Cut(msg, "\n")
	c.mark(first)
	c.t.Fatalf("%s", msg)
}

// hint adds to an error of the Case's client what the harness knows of its cause: where a missing CRD comes
// from (noMatchHint), which webhook did not answer (Suite.webhookHint).
func (c *Case) hint(err error) error { return c.s.webhookHint(noMatchHint(err)) }

// noMatchHint adds to a "no matches for kind" error where the CRD should have come from.
func noMatchHint(err error) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%w: its CRD is not installed; add the directory that holds it to Options.CRDDirectoryPaths (suite.ModuleDir finds a dependency's), or the CRD to Options.CRDs", err)
	}
	return err
}

func (c *Case) namespaced(obj client.Object) bool {
	ok, err := c.s.Client.IsObjectNamespaced(obj)
	return err != nil || ok
}

// cleanup runs the case's end-of-spec checks (invariants, scripts, oracles), dumps on failure (with the
// case's timeline), empties the namespace while the operators can still release their finalizers
// (deletion hygiene: what is still there after Options.CleanupTimeout fails the spec, named with its
// finalizers, and has its finalizers removed), hands the namespace to the namespace controller when
// kube-controller-manager runs one, runs the AfterCleanup functions and closes the gate. A passing spec
// whose name ENSEMBLE_TIMELINE selects gets its timeline too.
func (c *Case) cleanup() {
	at := time.Now()
	// The cleanup reports its own failures only at its end: a test failed by now failed in the spec.
	specFailed := c.t.Failed()
	c.stopInvariants()
	// The perturbation ends before anything is judged: the oracles look at how the operators recover.
	points, firedAt, failures := c.endPerturbation()
	failures = append(failures, c.reportPoints(points, firedAt)...)
	// Failures are reported last, in one Errorf: under Ginkgo, Errorf ends the cleanup there (GinkgoT's
	// Errorf panics), and the dump and the namespace's deletion must not be skipped.
	if err := c.invariantErrors(); err != "" {
		failures = append(failures, err)
	}
	for _, e := range c.scriptErrors() {
		first, _, _ := strings.Cut(e, "\n")
		c.mark(first)
		failures = append(failures, e)
	}
	j := &judgement{specFailed: specFailed}
	failures = append(failures, c.runOracles(j)...)
	// A case outside a spec (a suite node's, whose test has no name) is no spec's run to record.
	if c.s.exploreDir != "" && c.t.Name() != "" {
		if err := c.writeRecord(points, firedAt, j.endState(c), failures, specFailed); err != nil {
			failures = append(failures, "suite: ENSEMBLE_EXPLORE: writing the case's record: "+err.Error())
		}
	}
	dumped := c.t.Failed() || len(failures) > 0
	if dumped {
		c.writeDump(at)
	} else if c.s.timelineFor != nil && c.s.timelineFor.MatchString(c.t.Name()) {
		c.t.Logf("suite: %s (ENSEMBLE_TIMELINE, namespace %s)", c.writeCaseTimeline(at), c.Namespace)
	}
	defer func() {
		c.mu.Lock()
		after := c.after
		c.mu.Unlock()
		for i := len(after) - 1; i >= 0; i-- {
			after[i]()
		}
	}()
	if c.admitted {
		defer c.s.gate.close(c.Namespace)
	}
	defer c.s.rec.scopes.release(c.Namespace)
	if held := c.empty(); len(held) > 0 {
		msg := fmt.Sprintf("suite: deletion hygiene: %d objects of %s were still there %s after the spec (their finalizers were then removed):\n%s",
			len(held), c.Namespace, c.s.cleanupTimeout, indent(held))
		c.mark(msg)
		failures = append(failures, msg)
		if dumped {
			c.t.Logf("suite: %s (rewritten with the deletion hygiene failure of %s)", c.writeCaseTimeline(at), c.Namespace)
		} else {
			c.writeDump(at)
		}
	}
	c.s.deleteNamespace(c.Namespace, c.t.Name())
	if len(failures) > 0 {
		c.t.Errorf("%s", strings.Join(failures, "\n"))
	}
}

// writeDump writes the case's failure dump and its timeline, and logs where. at is when the cleanup began:
// the time of the timeline's failure mark when the spec noted none.
func (c *Case) writeDump(at time.Time) {
	path, summary, err := c.s.dump(c.Namespace, c.t.Name(), c.Started)
	if err != nil {
		c.t.Logf("suite: failure dump of %s failed: %v", c.Namespace, err)
		return
	}
	c.t.Logf("suite: failure dump of %s written to %s; %s\n%s", c.Namespace, path, c.writeCaseTimeline(at), summary)
}

// empty deletes the watched objects left in the namespace and waits (Options.CleanupTimeout) for them to
// go. It returns what was still there then, "Kind/name (finalizers: ...)", after removing its finalizers.
// While it waits it reads the event stream's cache; the API server is listed only when the cache is empty
// and at the deadline, so a cache that lags never reads as an empty namespace, and the busy API server is
// not listed for every kind on every change of the namespace.
func (c *Case) empty() []string {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cleanupTimeout)
	defer cancel()
	for {
		var left []client.Object
		if ctx.Err() == nil {
			left = c.cachedLeftovers()
		}
		if len(left) == 0 {
			left = c.leftovers()
			if len(left) == 0 {
				return nil
			}
		}
		if ctx.Err() != nil {
			var held []string
			for _, o := range left {
				held = append(held, fmt.Sprintf("%s/%s (finalizers: %s)", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), strings.Join(o.GetFinalizers(), ", ")))
				if len(o.GetFinalizers()) > 0 {
					_ = c.s.Client.Patch(context.Background(), o, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
				}
			}
			return held
		}
		seen := c.s.stream.lastSeq()
		c.s.deleteAll(ctx, slices.DeleteFunc(left, func(o client.Object) bool { return o.GetDeletionTimestamp() != nil }))
		c.awaitChange(ctx, seen, 200*time.Millisecond)
	}
}

// cleanupDeletes is how many deletes the cleanup has in flight at once. One at a time, the first round of a
// MatrixOne namespace's 13 to 18 objects took 0.6 to 4.8 s of its cleanup on a loaded machine (load 14 to 27),
// eight at a time 0.14 to 0.95 s (load 27 to 33).
const cleanupDeletes = 8

// deleteAll deletes objs with background propagation, cleanupDeletes at a time, and returns when every
// delete has returned. Errors are ignored: the cleanup lists what is left again and judges that.
func (s *Suite) deleteAll(ctx context.Context, objs []client.Object) {
	sem := make(chan struct{}, cleanupDeletes)
	var wg sync.WaitGroup
	for _, o := range objs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = s.Client.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground))
		})
	}
	wg.Wait()
}

// namespacedKinds returns the group, version and kind of each watched kind that lives in a namespace.
func (c *Case) namespacedKinds() []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, k := range c.s.watchKinds {
		if gvk, err := apiutil.GVKForObject(k, c.s.scheme); err == nil && c.namespaced(k) {
			out = append(out, gvk)
		}
	}
	return out
}

// cachedLeftovers lists the objects of the watched kinds the event stream's cache still holds in the case's
// namespace, as typed copies (the cache's List copies what it returns), and the cluster-scoped objects the
// case claimed that the API server still has (read from it: a claimed kind need not be watched).
func (c *Case) cachedLeftovers() []client.Object {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := c.claimedLeftovers(ctx)
	for _, gvk := range c.namespacedKinds() {
		l, err := c.s.scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err != nil {
			continue
		}
		list, ok := l.(client.ObjectList)
		if !ok || c.s.reader.List(context.Background(), list, client.InNamespace(c.Namespace)) != nil {
			continue
		}
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			if co, ok := o.(client.Object); ok {
				out = append(out, co)
			}
			return nil
		})
	}
	return out
}

// awaitChange returns once the stream has a change in the case's namespace after seq, after at most d, or
// when ctx ends. Changes in other namespaces do not wake it: a cleanup that listed its namespace on every
// change of a busy suite cost more API calls than the specs it ran beside.
func (c *Case) awaitChange(ctx context.Context, seq int64, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		wake := c.s.notify.wait()
		if len(c.s.stream.after(c.Namespace, seq)) > 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-wake:
		}
	}
}

// leftovers lists the objects of the watched kinds still in the case's namespace (each list bounded by
// 10 s of its own, so an expired cleanup deadline never reads as an empty namespace).
func (c *Case) leftovers() []client.Object {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []client.Object
	for _, gvk := range c.namespacedKinds() {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.s.Client.List(ctx, l, client.InNamespace(c.Namespace)); err != nil {
			continue
		}
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return append(out, c.claimedLeftovers(ctx)...)
}

// settledLeftovers is leftovers, after waiting for them to go when kube-controller-manager's namespace
// controller deletes the case's namespace. An object a controller created just after the cleanup emptied
// the namespace (kube-controller-manager's ReplicaSet controller, not yet aware that the cleanup deleted
// its ReplicaSet, replacing the pods the cleanup deleted) landed in the namespace as it was handed over, and
// the namespace controller deletes it with the namespace. It waits at most namespaceGoneBound, the time a
// case namespace is given to go, waking on the namespace's changes and at least once a second.
func (c *Case) settledLeftovers() []client.Object {
	ctx, cancel := context.WithTimeout(context.Background(), namespaceGoneBound)
	defer cancel()
	for {
		seen := c.s.stream.lastSeq()
		left := c.leftovers()
		if len(left) == 0 || !c.s.namespaceController || ctx.Err() != nil {
			return left
		}
		c.awaitChange(ctx, seen, time.Second)
	}
}

// claimedLeftovers reads from the API server the cluster-scoped objects the case claimed that still exist.
func (c *Case) claimedLeftovers(ctx context.Context) []client.Object {
	var out []client.Object
	for _, cl := range c.s.rec.scopes.claimed(c.Namespace) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(cl.gvk)
		if err := c.s.Client.Get(ctx, client.ObjectKey{Name: cl.name}, u); err == nil {
			out = append(out, u)
		}
	}
	return out
}
