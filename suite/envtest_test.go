package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ensembletest/ensemble/internal/controlplane"
	"github.com/ensembletest/ensemble/internal/recordtb"
)

// marker is a converging controller set up the way an operator's main sets one up: it takes the manager's
// client and sets data.seen on every ConfigMap once, then asks for an hourly resync.
type marker struct{ client.Client }

// markerFinalizer is the finalizer marker removes from a ConfigMap being deleted.
const markerFinalizer = "example.com/marker"

func (m *marker) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := m.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.DeletionTimestamp != nil {
		if controllerutil.RemoveFinalizer(cm, markerFinalizer) {
			return ctrl.Result{}, client.IgnoreNotFound(m.Update(ctx, cm))
		}
		return ctrl.Result{}, nil
	}
	if cm.Data["seen"] == "yes" {
		return ctrl.Result{RequeueAfter: time.Hour}, nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["seen"] = "yes"
	return ctrl.Result{}, m.Patch(ctx, cm, patch, client.FieldOwner("operator"))
}

func (m *marker) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(m)
}

// looper bumps data.n of every ConfigMap labelled loop=true on every pass, forever, under the same field
// manager as marker: two controllers of one binary that managedFields cannot tell apart.
type looper struct{ client.Client }

func (l *looper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := l.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	n, _ := strconv.Atoi(cm.Data["n"])
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["n"], cm.Data["seen"] = strconv.Itoa(n+1), "looped"
	return ctrl.Result{}, client.IgnoreNotFound(l.Patch(ctx, cm, patch, client.FieldOwner("operator")))
}

func (l *looper) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("looper").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()["loop"] == "true"
		}))).Complete(l)
}

// retrier fails its passes on a ConfigMap labelled fail=<n> until it has failed n times ("always": every
// time; "terminal": every time, with a reconcile.TerminalError), then passes. Its rate limiter retries a failed
// key after 1 s, longer than the quiescence windows its test uses, as a real backoff soon is.
type retrier struct {
	client.Client
	mu     sync.Mutex
	failed map[types.UID]int
}

func (r *retrier) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n, done := r.failed[cm.UID], false
	switch want := cm.Labels["fail"]; want {
	case "terminal":
		return ctrl.Result{}, reconcile.TerminalError(errors.New("retrier: gives up"))
	case "always":
	default:
		times, _ := strconv.Atoi(want)
		done = n >= times
	}
	if done {
		return ctrl.Result{}, nil
	}
	r.failed[cm.UID]++
	return ctrl.Result{}, fmt.Errorf("retrier: failure %d", n+1)
}

func (r *retrier) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("retrier").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()["fail"] != ""
		}))).
		WithOptions(controller.Options{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, time.Second)}).
		Complete(r)
}

// patience bounds every wait of the harness's envtest tests on a condition or on quiescence: such a wait
// returns as soon as its condition holds, so the bound costs nothing while the harness works and only has
// to outlast a loaded machine. It is Options.StartTimeout's default.
const patience = 60 * time.Second

// staller holds its pass on every ConfigMap labelled stall=true until release is called for the
// ConfigMap's namespace (or the manager stops): a namespace with a pass that does not end stays busy at any
// machine speed, where a writer's or a controller's round trip can outlast a quiescence window on a loaded
// machine.
type staller struct {
	mu       sync.Mutex
	released map[string]chan struct{}
}

// stall is the staller TestPlainTestingT's manager runs.
var stall = &staller{released: map[string]chan struct{}{}}

// gate returns the channel release closes for namespace ns.
func (st *staller) gate(ns string) chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	ch, ok := st.released[ns]
	if !ok {
		ch = make(chan struct{})
		st.released[ns] = ch
	}
	return ch
}

// release ends the held passes of namespace ns and lets every later one through; call it once per
// namespace.
func (st *staller) release(ns string) { close(st.gate(ns)) }

func (st *staller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-st.gate(req.Namespace):
	case <-ctx.Done():
	}
	return ctrl.Result{}, nil
}

func (st *staller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("staller").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()["stall"] == "true"
		}))).Complete(st)
}

// requireStalled waits until the staller holds a pass in c's namespace and releases it once c's cleanup
// has emptied the namespace.
func requireStalled(t *testing.T, s *Suite, c *Case) {
	t.Helper()
	NewWithT(t).Eventually(func() []Pass {
		var held []Pass
		for _, p := range c.Passes(PassFilter{Controller: "staller"}) {
			if p.End.IsZero() {
				held = append(held, p)
			}
		}
		return held
	}).WithTimeout(patience).ShouldNot(BeEmpty(), "the staller never held a pass in %s", c.Namespace)
	c.AfterCleanup(func() { stall.release(c.Namespace) })
}

// TestPlainTestingT boots the harness from a plain *testing.T (no Ginkgo) with an operator set up by its own
// SetupWithManager, checks the harness's verdicts both ways through Cases, and checks that Stop leaves no
// control-plane process and no goroutine of the suite.
func TestPlainTestingT(t *testing.T) {
	if _, err := controlplane.AssetsDir(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	gadgets := gadgetCRD()
	s, err := Boot(t.Context(), Options{Scheme: newScheme(), WatchKinds: []client.Object{&corev1.ConfigMap{}, &rbacv1.ClusterRole{}},
		Pins: catalog{"X-1": "a defect"}, CRDs: []*apiextensionsv1.CustomResourceDefinition{gadgets},
		Managers: []ManagerOptions{{Name: "op", Register: func(_ context.Context, mgr manager.Manager) error {
			if err := (&marker{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return err
			}
			if err := (&roleKeeper{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return err
			}
			if err := (&clientsetWriter{}).SetupWithManager(mgr); err != nil {
				return err
			}
			if err := mgr.Add(&annotator{Client: mgr.GetClient(), tried: map[types.UID]bool{}}); err != nil {
				return err
			}
			if err := stall.SetupWithManager(mgr); err != nil {
				return err
			}
			if err := (&retrier{Client: mgr.GetClient(), failed: map[types.UID]int{}}).SetupWithManager(mgr); err != nil {
				return err
			}
			return (&looper{Client: mgr.GetClient()}).SetupWithManager(mgr)
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("envtest boot %s, kube-controller-manager collecting after %s more, ready %s", s.EnvtestBoot, s.KubeControllersReady, s.Ready)
	if gadgets.ResourceVersion != "" || gadgets.Status.AcceptedNames.Kind != "" {
		t.Errorf("Boot changed the CRD object it was given: %+v", gadgets.ObjectMeta)
	}
	if n := len(controlplane.ChildControlPlanes()); n != 3 {
		t.Fatalf("want kube-apiserver, etcd and kube-controller-manager as children, got pids %v", controlplane.ChildControlPlanes())
	}
	t.Run("CRD given as an object", func(t *testing.T) { testCRDObject(t, s) })
	t.Run("wrapped controller", func(t *testing.T) { testWrappedController(t, s) })
	t.Run("field writers", func(t *testing.T) { testFieldWriters(t, s) })
	t.Run("quiescence verdicts", func(t *testing.T) { testQuiescenceVerdicts(t, s) })
	t.Run("quiescence waits for a retry", func(t *testing.T) { testQuiescenceWaitsForARetry(t, s) })
	t.Run("invariants", func(t *testing.T) { testInvariants(t, s) })
	t.Run("pins", func(t *testing.T) { testPins(t, s) })
	t.Run("deletion hygiene", func(t *testing.T) { testDeletionHygiene(t, s) })
	t.Run("scripts", func(t *testing.T) { testScripts(t, s) })
	t.Run("oracles", func(t *testing.T) { testOracles(t, s) })
	t.Run("requested timeline", func(t *testing.T) { testRequestedTimeline(t, s) })
	t.Run("perturbation", func(t *testing.T) { testPerturbation(t, s) })
	t.Run("runs", func(t *testing.T) { testRuns(t, s) })
	t.Run("leader election", func(t *testing.T) { testLeaderElection(t, s) })
	t.Run("cluster-scoped objects", func(t *testing.T) { testClusterScoped(t, s) })
	t.Run("clientset writes", func(t *testing.T) { testClientsetWrites(t, s) })
	t.Run("runnable", func(t *testing.T) { testRunnable(t, s) })
	t.Run("client and controller options", func(t *testing.T) { testManagerClientAndController(t, s) })
	t.Run("a fresh instance reads through its own cache", func(t *testing.T) { testFreshInstanceReadsItsOwnCache(t, s) })

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if left := controlplane.ChildControlPlanes(); len(left) != 0 {
		t.Fatalf("control-plane processes left after Stop: %v", left)
	}
}

// testWrappedController checks that a controller the builder made from the operator's own setup is gated,
// counted, compressed and attributed under the builder's name ("configmap", the lowercased kind of For).
func testWrappedController(t *testing.T, s *Suite) {
	c := s.NewCase(t)
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m"}}); err != nil {
		t.Fatal(err)
	}
	// Quiescence cannot see an event still on its way to a controller (a loaded machine stretches that past
	// any window): wait for what the controller must do first, the write, then a pass its compressed hourly
	// requeue alone woke, and only then for the namespace to stay quiet.
	NewWithT(t).Eventually(func() []Write { return c.Writes(WriteFilter{Manager: "op"}) }).WithTimeout(patience).ShouldNot(BeEmpty())
	requeueOnly := func() int {
		n := 0
		for _, p := range c.Passes(PassFilter{Controller: "configmap"}) {
			if p.Requeued && !p.Event && !p.End.IsZero() {
				n++
			}
		}
		return n
	}
	NewWithT(t).Eventually(requeueOnly).WithTimeout(patience).ShouldNot(BeZero(), "no pass of the controller was woken by its requeue alone")
	c.RequireQuiescent(300*time.Millisecond, patience)
	ws := c.Writes(WriteFilter{Manager: "op"})
	if len(ws) != 1 || ws[0].Controller != "configmap" || ws[0].Pass == 0 || ws[0].Verb != VerbPatch || ws[0].FieldOwner != "operator" || ws[0].ResourceVersion == "" || ws[0].UID == "" {
		t.Fatalf("operator writes = %v, want one patch by controller configmap, attributed to a pass, with the object's resourceVersion and uid", ws)
	}
	ps := c.Passes(PassFilter{Controller: "configmap"})
	if last := ps[len(ps)-1]; last.Asked != time.Hour || last.RequeueAfter != 50*time.Millisecond {
		t.Fatalf("last pass %s: want the asked hour compressed to 50ms", last.line())
	}
	// The create's event woke the first pass; the compressed hourly requeue alone wakes the later ones.
	if !ps[0].Event || ps[0].Requeued {
		t.Fatalf("first pass %s woken by an event: %v, by a requeue: %v; want the controller's queue to tell them apart", ps[0].line(), ps[0].Event, ps[0].Requeued)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get("m", cm); err != nil {
		t.Fatal(err)
	}
	if ok, _ := HaveFieldManagersWithin(CaseFieldManager, "operator").Match(cm); !ok {
		t.Fatalf("%s", HaveFieldManagersWithin(CaseFieldManager, "operator").FailureMessage(cm))
	}

	// A kind whose CRD is not installed: the error says where CRDs come from.
	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	widget.SetName("w")
	if err := c.Create(widget); err == nil || !strings.Contains(err.Error(), "Options.CRDDirectoryPaths") {
		t.Fatalf("creating a kind with no CRD: %v, want a hint at Options.CRDDirectoryPaths", err)
	}

	// A namespace no case admitted: requests are recorded as gated and never reach the reconciler.
	closed := s.NewCase(t, Unadmitted())
	closed.OptOut(Convergence, "unadmitted on purpose: no reconciler may run in it")
	if err := closed.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "outside"}}); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() []Pass { return closed.Passes(PassFilter{Gated: true}) }).WithTimeout(patience).
		ShouldNot(BeEmpty(), "no gated pass recorded for the unadmitted namespace")
	if real := closed.Passes(PassFilter{}); len(real) != 0 || len(closed.Writes(WriteFilter{Manager: "op", IncludeRejected: true})) != 0 {
		t.Fatalf("a request from an unadmitted namespace reached the reconciler: %d passes", len(real))
	}
}

// testFieldWriters checks that the recorder tells apart two controllers of one binary that share a field
// manager: both write data.seen, only the looper writes data.n.
func testFieldWriters(t *testing.T, s *Suite) {
	c := s.NewCase(t)
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "both", Labels: map[string]string{"loop": "true"}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one"}}); err != nil {
		t.Fatal(err)
	}
	// The marker sets data.seen on every ConfigMap and the looper overwrites it on the labelled one: a field
	// two controllers of one binary both write, under one field manager.
	g := NewWithT(t)
	g.Eventually(func() map[string][]string { return c.FieldWriters("ConfigMap", "both") }).WithTimeout(patience).Should(And(
		HaveKeyWithValue("data.seen", []string{"op/configmap", "op/looper"}),
		HaveKeyWithValue("data.n", []string{"op/looper"})))
	g.Eventually(func() map[string][]string { return c.FieldWriters("ConfigMap", "one") }).WithTimeout(patience).Should(
		HaveKeyWithValue("data.seen", []string{"op/configmap"}))
	// A write that changes nothing answers with the resourceVersion the marker's write made: it must not
	// take the marker's change over.
	one := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: c.Namespace}}
	if err := c.Client.Patch(t.Context(), one, client.RawPatch(types.MergePatchType, []byte(`{}`))); err != nil {
		t.Fatal(err)
	}
	if w := c.Writes(WriteFilter{Name: "one", Manager: "case", Verb: VerbPatch}); len(w) != 1 || w[0].ResourceVersion == "" {
		t.Fatalf("the case's no-op patch was not recorded with a resourceVersion: %v", w)
	}
	g.Expect(c.FieldWriters("ConfigMap", "one")).To(HaveKeyWithValue("data.seen", []string{"op/configmap"}),
		"a no-op write took over the change an earlier write made")
	c.Delete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "both"}})

	// The case's delete of an object with a finalizer marks it (deletionTimestamp, a change); the marker's
	// update that removes the finalizer, and so deletes it, answers with the resourceVersion of that mark.
	// The mark is the case's: before the delete's answer was recorded, FieldWriters named the marker.
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{markerFinalizer}}}
	if err := c.Create(held); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() map[string][]string { return c.FieldWriters("ConfigMap", "held") }).WithTimeout(patience).Should(
		HaveKey("data.seen"), "the marker's first pass, before the delete")
	if err := c.Delete(held); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() []Write {
		return c.Writes(WriteFilter{Name: "held", Manager: "op", Verb: VerbUpdate})
	}).WithTimeout(patience).ShouldNot(BeEmpty(), "the marker's update that removed its finalizer")
	g.Eventually(func() map[string][]string { return c.FieldWriters("ConfigMap", "held") }).WithTimeout(patience).Should(
		HaveKeyWithValue("metadata.deletionTimestamp", []string{"case/spec"}), "the delete's mark is the case's")
}

// testQuiescenceVerdicts checks both verdicts: quiet for a quiet namespace, and not quiet (naming the
// object, the field and the writer) for a looping one.
func testQuiescenceVerdicts(t *testing.T, s *Suite) {
	quiet := s.NewCase(t)
	for _, bad := range [][2]time.Duration{{0, 0}, {5 * time.Second, 2 * time.Second}} {
		if _, err := quiet.Quiescent(bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("Quiescent(%s, %s) = %v, want the window refused", bad[0], bad[1], err)
		}
	}
	// Nothing happened in the new namespace yet: it has not been quiet for any window before its start.
	if took, err := quiet.Quiescent(300*time.Millisecond, patience); err != nil || took < 250*time.Millisecond {
		t.Errorf("a fresh namespace was quiet after %s (%v): quiet time must count from the case's start", took, err)
	}
	if err := quiet.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "still"}}); err != nil {
		t.Fatal(err)
	}
	quiet.RequireQuiescent(300*time.Millisecond, patience)

	p := &recordtb.TB{TestName: "looping"}
	defer p.RunCleanups()
	loud := s.NewCase(p)
	// The looper's round trip can outlast the window on a loaded machine; the staller's held pass cannot
	// end early, so the verdict does not depend on the machine's speed. The looper's writes during the
	// wait name the object, the field and the writer.
	if err := loud.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "spinner", Labels: map[string]string{"loop": "true", "stall": "true"}}}); err != nil {
		t.Fatal(err)
	}
	requireStalled(t, s, loud)
	loud.RequireQuiescent(300*time.Millisecond, 5*time.Second)
	msg := strings.Join(p.Fatals(), "\n")
	for _, want := range []string{errNotQuiet.Error(), "ConfigMap/spinner", "data.n", "op/looper patch"} {
		if !strings.Contains(msg, want) {
			t.Errorf("not-quiet verdict does not name %q:\n%s", want, msg)
		}
	}
	loud.Delete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "spinner"}})
	p.RunCleanups()
	page := timelineLogged(t, p.Logs(), "failure dump of "+loud.Namespace)
	for _, want := range []string{`data-lane="op/looper"`, `data-kind="mark"`, "RequireQuiescent: namespace " + loud.Namespace} {
		if !strings.Contains(page, want) {
			t.Errorf("the failed spec's timeline does not hold %q", want)
		}
	}
}

// testQuiescenceWaitsForARetry: a key whose last pass failed is retried by its controller's rate limiter,
// so quiescence waits for that retry (1 s later, past the 300 ms window) and passes once it succeeds; it
// fails a key that fails every time only at its timeout, and a key whose error was terminal at once.
func testQuiescenceWaitsForARetry(t *testing.T, s *Suite) {
	failing := func(c *Case, name, fail string) {
		t.Helper()
		if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fail": fail}}}); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(func() bool {
			return slices.ContainsFunc(c.Passes(PassFilter{Controller: "retrier"}), func(p Pass) bool { return p.Err != nil })
		}).WithTimeout(patience).Should(BeTrue(), "the retrier never failed a pass in %s", c.Namespace)
	}
	c := s.NewCase(t)
	failing(c, "twice", "2")
	if took, err := c.Quiescent(300*time.Millisecond, patience); err != nil || took < 900*time.Millisecond {
		t.Errorf("a key retried after failing twice: quiet after %s with %v, want quiet once its retries succeeded (each 1 s after the last failure)", took, err)
	}
	if p := c.Passes(PassFilter{Controller: "retrier"}); len(p) < 3 || p[len(p)-1].Err != nil {
		t.Errorf("the retrier's passes %v: want 2 failures, then a pass without error", p)
	}

	p := &recordtb.TB{TestName: "always"}
	defer p.RunCleanups()
	always := s.NewCase(p)
	failing(always, "always", "always")
	// Retried every second from its first failure: the 2.5 s timeout falls half a second from the retries.
	if took, err := always.Quiescent(300*time.Millisecond, 2500*time.Millisecond); !errors.Is(err, errLastPassFailed) || took < 2500*time.Millisecond {
		t.Errorf("a key that always fails: %v after %s, want %v at the 2.5 s timeout", err, took, errLastPassFailed)
	}

	q := &recordtb.TB{TestName: "terminal"}
	defer q.RunCleanups()
	terminal := s.NewCase(q)
	failing(terminal, "gives-up", "terminal")
	if took, err := terminal.Quiescent(300*time.Millisecond, patience); !errors.Is(err, errLastPassFailed) || took > patience/2 {
		t.Errorf("a key whose error was terminal: %v after %s, want %v without waiting for the timeout", err, took, errLastPassFailed)
	}
}

// timelineLogged finds, in a case's log lines, the one that starts with prefix after "suite: " and names
// the case's timeline page and trace, checks that both exist, and returns the page.
func timelineLogged(t *testing.T, logs []string, prefix string) string {
	t.Helper()
	re := regexp.MustCompile(`timeline (\S+\.html), trace-event JSON \(Perfetto\) (\S+\.json)`)
	for _, l := range logs {
		if !strings.HasPrefix(l, "suite: "+prefix) {
			continue
		}
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("%q does not name the timeline and its trace", l)
		}
		if _, err := os.Stat(m[2]); err != nil {
			t.Fatalf("trace: %v", err)
		}
		page, err := os.ReadFile(m[1])
		if err != nil {
			t.Fatalf("timeline: %v", err)
		}
		return string(page)
	}
	t.Fatalf("no log line starts with %q: %q", "suite: "+prefix, logs)
	return ""
}

// testInvariants checks that the first violation is kept with the changes around it, that a pin can take
// it, and that an invariant that holds stays silent.
func testInvariants(t *testing.T, s *Suite) {
	maxN := func(limit int) func(context.Context, client.Reader, string) error {
		return func(ctx context.Context, r client.Reader, ns string) error {
			l := &corev1.ConfigMapList{}
			if err := r.List(ctx, l, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, cm := range l.Items {
				if n, _ := strconv.Atoi(cm.Data["n"]); n > limit {
					return fmt.Errorf("ConfigMap %s has n=%d > %d", cm.Name, n, limit)
				}
			}
			return nil
		}
	}
	c := s.NewCase(t)
	c.Invariant("n stays at most 3", maxN(3))
	if err := c.TakeViolation("n stays at most 3"); err != nil {
		t.Fatalf("violation before anything ran: %v", err)
	}
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "climber", Labels: map[string]string{"loop": "true"}}}); err != nil {
		t.Fatal(err)
	}
	var err error
	NewWithT(t).Eventually(func() error { err = c.TakeViolation("n stays at most 3"); return err }).
		WithTimeout(patience).Should(HaveOccurred(), "the invariant never broke")
	for _, want := range []string{`invariant "n stays at most 3" violated`, "ConfigMap climber has n=4 > 3", "ConfigMap/" + c.Namespace + "/climber"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("violation does not say %q:\n%v", want, err)
		}
	}
	if !strings.Contains(errors.Unwrap(err).Error(), "n=4 > 3") {
		t.Errorf("the violation does not unwrap to what the invariant returned: %v", errors.Unwrap(err))
	}
	if err := c.TakeViolation("no such invariant"); !errors.Is(err, errHarness) {
		t.Errorf("TakeViolation of an unknown invariant = %v, want a harness error", err)
	}
	c.Delete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "climber"}})

	calm := s.NewCase(t)
	calm.Invariant("n stays at most 3", maxN(3))
	if err := calm.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "calm"}, Data: map[string]string{"n": "1"}}); err != nil {
		t.Fatal(err)
	}
	calm.RequireQuiescent(300*time.Millisecond, patience)
	calm.RequireInvariants()
}

// testPins checks KnownDefect through a Case both ways, against the suite's catalog.
func testPins(t *testing.T, s *Suite) {
	p := &recordtb.TB{TestName: "pin"}
	defer p.RunCleanups()
	c := s.NewCase(p)
	c.KnownDefect("X-1", func() error { return errors.New("message flapped") })
	if p.Failed() || len(p.Reports()) != 1 || !strings.Contains(p.Reports()[0], "X-1 still present: message flapped") {
		t.Fatalf("present defect: fatals %q reports %q", p.Fatals(), p.Reports())
	}
	c.KnownDefect("X-1", func() error { return nil })
	c.KnownDefect("MG-NOPE", func() error { return errors.New("x") })
	if len(p.Fatals()) != 2 || !strings.Contains(p.Fatals()[0], "X-1 appears fixed: replace this pin with a positive assertion") ||
		!strings.Contains(p.Fatals()[1], "no such defect") {
		t.Fatalf("fixed defect and unknown reference: fatals %q", p.Fatals())
	}
	if m := c.failureMarks(time.Now()); len(m) != 2 || m[0].What != p.Fatals()[0] || m[1].What != p.Fatals()[1] {
		t.Fatalf("marks %v: want both failing verdicts marked for the timeline", m)
	}
}

// testRequestedTimeline: a passing spec whose name ENSEMBLE_TIMELINE selects gets a timeline at cleanup,
// without a failure mark; one it does not select gets none.
func testRequestedTimeline(t *testing.T, s *Suite) {
	s.timelineFor = regexp.MustCompile("^requested")
	defer func() { s.timelineFor = nil }()
	for _, name := range []string{"requested timeline", "not requested"} {
		p := &recordtb.TB{TestName: name}
		c := s.NewCase(p)
		if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m"}}); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(func() []Write { return c.Writes(WriteFilter{Manager: "op"}) }).WithTimeout(patience).ShouldNot(BeEmpty())
		p.RunCleanups()
		if p.Failed() {
			t.Fatalf("%s: %q %q", name, p.Fatals(), p.Errors())
		}
		if name == "not requested" {
			if len(p.Logs()) != 0 {
				t.Fatalf("a spec ENSEMBLE_TIMELINE does not select logged %q", p.Logs())
			}
			continue
		}
		page := timelineLogged(t, p.Logs(), "timeline ")
		if !strings.Contains(page, `data-lane="op/configmap"`) || !strings.Contains(page, `data-lane="case/spec"`) || strings.Contains(page, `data-kind="mark"`) {
			t.Fatalf("the requested timeline of a passing spec: want the controller's and the case's lanes and no failure mark")
		}
	}
}

// testDeletionHygiene: an object whose finalizer nobody removes fails its spec at cleanup, named with the
// finalizer; the case's namespace is then handed to the real namespace controller, which removes it. The
// test double fails as GinkgoT does (Errorf panics), and the case also has a violated invariant: the
// cleanup must still dump, with both failures marked on the timeline, and still delete the namespace.
func testDeletionHygiene(t *testing.T, s *Suite) {
	// The stuck object outlasts any bound: a short one here keeps the test short, and every other case
	// keeps the generous default, which a loaded machine's deletions need.
	defer func(d time.Duration) { s.cleanupTimeout = d }(s.cleanupTimeout)
	s.cleanupTimeout = 3 * time.Second
	p := &recordtb.TB{TestName: "hygiene", Ginkgo: true}
	c := s.NewCase(p)
	c.Invariant("never holds", func(context.Context, client.Reader, string) error { return errors.New("broken from the start") })
	stuck := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Finalizers: []string{"example.com/never"}}}
	if err := c.Create(stuck); err != nil {
		t.Fatal(err)
	}
	p.RunCleanups()
	if len(p.Errors()) != 1 {
		t.Fatalf("cleanup errors %q, want one that reports both failures", p.Errors())
	}
	msg := p.Errors()[0]
	if !strings.Contains(msg, "deletion hygiene") || !strings.Contains(msg, "ConfigMap/stuck (finalizers: example.com/never)") || !strings.Contains(msg, `invariant "never holds" violated`) {
		t.Fatalf("cleanup error %q, want the violated invariant, the held object and its finalizer named", msg)
	}
	page := timelineLogged(t, p.Logs(), "timeline ")
	for _, want := range []string{"deletion hygiene: 1 objects of " + c.Namespace, `invariant &#34;never holds&#34; violated: broken from the start`} {
		if !strings.Contains(page, want) {
			t.Errorf("the timeline rewritten after deletion hygiene does not mark %q", want)
		}
	}
	NewWithT(t).Eventually(func() bool {
		return apierrors.IsNotFound(s.Client.Get(t.Context(), client.ObjectKey{Name: c.Namespace}, &corev1.Namespace{}))
	}).WithTimeout(patience).Should(BeTrue(), "the namespace controller never removed %s", c.Namespace)
}

// testLeaderElection starts two ungated instances of the marker on one Lease, scoped to an unadmitted case
// namespace (where the gated "op" does not reconcile): exactly one leads, only it reconciles and writes, and
// once it stops the other leads and marks what is created next.
func testLeaderElection(t *testing.T, s *Suite) {
	c := s.NewCase(t, Unadmitted())
	g := NewWithT(t)
	start := func(name string) *Manager {
		m, err := s.StartManager(ManagerOptions{Name: name, Ungated: true,
			Cache:          cache.Options{DefaultNamespaces: map[string]cache.Config{c.Namespace: {}}},
			LeaderElection: true, LeaderElectionID: "marker", LeaderElectionNamespace: c.Namespace,
			Register: func(_ context.Context, mgr manager.Manager) error {
				return (&marker{Client: mgr.GetClient()}).SetupWithManager(mgr)
			}})
		if err != nil {
			t.Fatal(err)
		}
		c.AfterCleanup(func() { _ = m.Stop() })
		return m
	}
	a, b := start("le-a"), start("le-b")
	elected := func() []string {
		var out []string
		for _, m := range []*Manager{a, b} {
			select {
			case <-m.Elected():
				out = append(out, m.Name)
			default:
			}
		}
		return out
	}
	g.Eventually(elected).WithTimeout(patience).ShouldNot(BeEmpty())
	g.Consistently(elected).WithTimeout(4*leaseRetryPeriod).Should(HaveLen(1), "both instances on one Lease lead")
	leader, follower := a, b
	if elected()[0] == b.Name {
		leader, follower = b, a
	}

	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "first"}}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() []Write { return c.Writes(WriteFilter{Name: "first", Manager: leader.Name}) }).WithTimeout(patience).ShouldNot(BeEmpty())
	c.RequireQuiescent(300*time.Millisecond, patience)
	// The follower's leader election tries the Lease (its writes are recorded, under LeaderElection); nothing
	// else of it may run.
	ws := slices.DeleteFunc(c.Writes(WriteFilter{Manager: follower.Name, IncludeRejected: true}), func(w Write) bool { return w.Controller == LeaderElection })
	if ps := c.Passes(PassFilter{Manager: follower.Name}); len(ws)+len(ps) != 0 {
		t.Fatalf("the follower %s ran while %s led: writes %v, %d passes", follower.Name, leader.Name, ws, len(ps))
	}
	if len(c.Writes(WriteFilter{Manager: leader.Name, Controller: LeaderElection, Kind: "Lease"})) == 0 {
		t.Fatalf("no Lease renewal of the leader %s was recorded under %s", leader.Name, LeaderElection)
	}

	if err := leader.Stop(); err != nil {
		t.Fatal(err)
	}
	g.Eventually(follower.Elected()).WithTimeout(patience).Should(BeClosed(), "%s never took over from %s", follower.Name, leader.Name)
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "second"}}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func() []Write { return c.Writes(WriteFilter{Name: "second", Manager: follower.Name}) }).WithTimeout(patience).ShouldNot(BeEmpty())
	if ws := c.Writes(WriteFilter{Name: "second", Manager: leader.Name, IncludeRejected: true}); len(ws) != 0 {
		t.Fatalf("the stopped leader %s wrote: %v", leader.Name, ws)
	}
}

// TestControllerWatchingAKindWithNoCRD: a controller that watches a kind whose CRD is not installed used to
// boot, never run, and let every spec pass. Its manager now stops within Options.StartTimeout (the
// controller's cache sync timeout) and the checks after that fail naming it.
func TestControllerWatchingAKindWithNoCRD(t *testing.T) {
	if _, err := controlplane.AssetsDir(); err != nil {
		t.Skip(err)
	}
	widget := &metav1.PartialObjectMetadata{}
	widget.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	start := time.Now()
	// The control plane starts within the Options default, as a loaded machine needs. The manager's cache
	// sync bound is what the test waits out, and no bound lets a kind with no CRD sync: a short one keeps
	// the test short.
	s, err := Boot(t.Context(), Options{Scheme: newScheme(), WatchKinds: []client.Object{&corev1.ConfigMap{}},
		Pins: catalog{}, KubeControllers: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	s.startTimeout = 5 * time.Second
	p := &recordtb.TB{TestName: "no-crd"}
	c := s.NewCase(p)
	defer p.RunCleanups()
	_, err = s.StartManager(ManagerOptions{Name: "op", Register: func(_ context.Context, mgr manager.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).WatchesMetadata(widget, &handler.EnqueueRequestForObject{}).
			Complete(&marker{Client: mgr.GetClient()})
	}})
	if err == nil {
		// The manager stops once its controller's sync times out; the next check fails naming it.
		NewWithT(t).Eventually(s.broken).WithTimeout(patience).Should(HaveOccurred(), "manager op never stopped")
		_, err = c.Quiescent(time.Second, patience)
	}
	t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), "manager op") {
		t.Fatalf("got %v, want an error naming manager op", err)
	}
}

// ownerless sets data.seen on every ConfigMap with a merge patch that names no field owner, as an operator
// relying on its client's default field owner writes.
type ownerless struct{ client.Client }

func (o *ownerless) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := o.Get(ctx, req.NamespacedName, cm); err != nil || cm.Data["seen"] == "yes" {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, o.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"seen":"yes"}}`)))
}

// testManagerClientAndController starts a manager with the client options and controller configuration an
// operator's main sets (a default field owner, ConfigMaps read uncached, a priority queue, two workers, a
// cache sync timeout of minutes): the manager runs with them, but for the fields the harness overrides, and a
// write naming no field owner is recorded with the default the API server applied.
func testManagerClientAndController(t *testing.T, s *Suite) {
	c := s.NewCase(t, Unadmitted())
	m, err := s.StartManager(ManagerOptions{Name: "opts", Ungated: true,
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{c.Namespace: {}}},
		Client:     client.Options{FieldOwner: "capi-manager", Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}}}},
		Controller: config.Controller{UsePriorityQueue: ptr.To(true), MaxConcurrentReconciles: 2, CacheSyncTimeout: 5 * time.Minute},
		Register: func(_ context.Context, mgr manager.Manager) error {
			return ctrl.NewControllerManagedBy(mgr).Named("ownerless").For(&corev1.ConfigMap{}).Complete(&ownerless{Client: mgr.GetClient()})
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.AfterCleanup(func() { _ = m.Stop() })
	got := m.mgr.GetControllerOptions()
	if got.UsePriorityQueue == nil || !*got.UsePriorityQueue || got.MaxConcurrentReconciles != 2 ||
		got.SkipNameValidation == nil || !*got.SkipNameValidation || got.CacheSyncTimeout != s.startTimeout {
		t.Fatalf("the manager's controller options are %+v; want the priority queue and 2 workers asked, name validation skipped and the cache sync bounded by %s", got, s.startTimeout)
	}
	// Created with data: the API server tracks no field of an object created without any, nor of its updates.
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned"}, Data: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() []Write { return c.Writes(WriteFilter{Manager: "opts", Name: "owned"}) }).WithTimeout(patience).ShouldNot(BeEmpty())
	if w := c.Writes(WriteFilter{Manager: "opts", Name: "owned"})[0]; w.FieldOwner != "capi-manager" {
		t.Fatalf("write %+v: recorded field owner %q, want the client's default capi-manager", w, w.FieldOwner)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get("owned", cm); err != nil {
		t.Fatal(err)
	}
	if own, err := OwnershipOf(cm); err != nil || !slices.Contains(own.Owners("data.seen"), "capi-manager") {
		t.Fatalf("data.seen is owned by %v (%v), want capi-manager: the client options did not reach the manager's client", own.Owners("data.seen"), err)
	}
}

// testFreshInstanceReadsItsOwnCache starts a manager whose client options set a cache, as cluster-api's main
// does (Secrets read uncached), reads a ConfigMap through its client, stops it and starts a fresh instance
// from the same ManagerOptions, as a restart point and each run of a batch do: the fresh instance's client
// reads a ConfigMap created after the first instance stopped. controller-runtime sets Client.Cache.Reader
// in the options it is handed; before each instance got a copy of them, the fresh client read through the
// stopped instance's cache and never found the ConfigMap (cluster-api's second run never saw its Cluster).
func testFreshInstanceReadsItsOwnCache(t *testing.T, s *Suite) {
	c := s.NewCase(t, Unadmitted())
	c.OptOut(Convergence, "the managers' clients are under test, and no controller of theirs runs")
	opts := ManagerOptions{Name: "instances", Ungated: true,
		Cache:    cache.Options{DefaultNamespaces: map[string]cache.Config{c.Namespace: {}}},
		Client:   client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Register: noop}
	// read gets ConfigMap name of the case namespace through m's client, as a reconciler reads it.
	read := func(m *Manager, name string) error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		return m.mgr.GetClient().Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, &corev1.ConfigMap{})
	}
	first, err := s.StartManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() error { return read(first, "before") }).WithTimeout(patience).Should(Succeed())
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if opts.Client.Cache.Reader != nil {
		t.Errorf("starting a manager set Client.Cache.Reader of its ManagerOptions to %T: the next instance would read through it", opts.Client.Cache.Reader)
	}
	fresh, err := s.StartManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	c.AfterCleanup(func() { _ = fresh.Stop() })
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(func() error { return read(fresh, "after") }).WithTimeout(10*time.Second).Should(Succeed(),
		"the fresh instance's client does not find a ConfigMap its own cache holds: it reads through another cache")
	if got, own := fresh.mgr.GetCache(), first.mgr.GetCache(); got == own {
		t.Fatal("the fresh instance has the stopped instance's cache")
	}
}

// gadgetCRD is a namespaced CRD, gadgets.example.com, built in Go as a dependency's CRDs may be.
func gadgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
}

// testCRDObject creates a Gadget, the kind of the CRD Boot got as an object (Options.CRDs): it is served.
func testCRDObject(t *testing.T, s *Suite) {
	c := s.NewCase(t, Unadmitted())
	c.OptOut(Convergence, "no controller reconciles Gadgets")
	g := &unstructured.Unstructured{}
	g.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"})
	g.SetName("g")
	if err := c.Create(g); err != nil {
		t.Fatalf("creating a Gadget, whose CRD Boot got in Options.CRDs: %v", err)
	}
}

// TestStopNamesTheManagerHoldingAWatch: kube-apiserver does not stop while a watch is open on it, and
// envtest's timeout names no cause. A manager whose Register starts a watch on context.Background() (not on
// the ctx it gets) leaves that watch open past its own stop; Suite.Stop's error names the manager, its
// User-Agent and the watch, and none of the watches the manager's own informers closed when it stopped.
func TestStopNamesTheManagerHoldingAWatch(t *testing.T) {
	if _, err := controlplane.AssetsDir(); err != nil {
		t.Skip(err)
	}
	s, err := Boot(t.Context(), Options{Scheme: newScheme(), WatchKinds: []client.Object{&corev1.ConfigMap{}},
		Pins: catalog{}, KubeControllers: []string{}, StopTimeout: 3 * time.Second,
		Managers: []ManagerOptions{{Name: "leaky", Register: func(_ context.Context, mgr manager.Manager) error {
			cs, err := kubernetes.NewForConfig(mgr.GetConfig())
			if err != nil {
				return err
			}
			w, err := cs.CoreV1().Secrets("").Watch(context.Background(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			go func() {
				for range w.ResultChan() {
				}
			}()
			return (&marker{Client: mgr.GetClient()}).SetupWithManager(mgr)
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Stop()
	t.Log(err)
	msg := fmt.Sprint(err)
	for _, want := range []string{"kube-apiserver", "watches still open on it: manager leaky (User-Agent ensemble-leaky/v0) holds 1 watch: GET /api/v1/secrets?", "watch=true"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stop's error does not say %q", want)
		}
	}
	if strings.Contains(msg, "configmaps") {
		t.Errorf("Stop's error names a watch of the manager's informers, which closed when it stopped")
	}
}
