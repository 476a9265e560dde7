package matrixone_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ensembletest/ensemble/fakes/dataplane"
	"github.com/ensembletest/ensemble/internal/planetest"
	"github.com/ensembletest/ensemble/operators/matrixone"
	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
)

// The pod-set controllers (LogSet, DNSet, ProxySet) against a real API server, with fakes/dataplane as the
// kubelet (config-suffix changes restart a pod in place). Skipped without envtest binaries
// (tools/envtest/build.sh) or with -short.
//
// TestMain is the package's only one: tests of other controllers of this package share envCfg, envScheme and
// envClient.

var (
	// envCfg reaches the API server as an administrator, with User-Agent mini-matrixone/v0 (operator
	// managers); nil when envtest is not running (tests skip).
	envCfg *rest.Config
	// envScheme holds client-go's kinds and the operator's.
	envScheme = runtime.NewScheme()
	// envClient is the tests' direct (uncached) client, User-Agent ensemble-test/v0.
	envClient client.WithWatch
)

// testUserAgent is the User-Agent, hence the default field manager, of envClient.
const testUserAgent = "ensemble-test/v0"

func TestMain(m *testing.M) {
	os.Exit(planetest.Run(m, planetest.Options{
		SkipShort: true, // envtest tests skip themselves under -short (envCfg nil)
		CRDs:      []string{filepath.Join("config", "crd")},
		Setup: func(plane *rest.Config) (func() error, error) {
			_ = clientgoscheme.AddToScheme(envScheme)
			_ = mov1.AddToScheme(envScheme)
			cfg := rest.CopyConfig(plane)
			cfg.UserAgent = "mini-matrixone/v0"
			direct := rest.CopyConfig(plane)
			direct.UserAgent = testUserAgent
			var err error
			if envClient, err = client.NewWithWatch(direct, client.Options{Scheme: envScheme}); err != nil {
				return nil, err
			}
			envCfg = cfg
			return nil, nil
		},
	}))
}

// requireEnvtest skips t when envtest is not running.
func requireEnvtest(t *testing.T) {
	t.Helper()
	if envCfg == nil {
		t.Skip("no envtest binaries (tools/envtest/build.sh) or -short")
	}
}

// newNamespace creates a fresh namespace.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := envClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// runManager starts a manager with opts (metrics off, controller names may repeat) after setup registered
// its controllers, and returns a stop function (idempotent, also run at cleanup) that returns once the
// manager has stopped.
func runManager(t *testing.T, opts ctrl.Options, setup func(ctrl.Manager) error) (stop func()) {
	t.Helper()
	opts.Scheme = envScheme
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.Controller = config.Controller{SkipNameValidation: new(true)}
	mgr, err := ctrl.NewManager(envCfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// Dataplane timings: a restarted pod is not Ready for readyDelay, long against a reconcile pass, so that
// restarts that happen together overlap visibly.
const readyDelay = 150 * time.Millisecond

// restartReadyDelay is readyDelay for TestConfigRevisionRestart, whose live side asks whether every pod of a
// set went down before the first came back: the kubelet stand-in takes the pods' restarts one after the other,
// which spread over 400 ms under -race at load 7, longer than readyDelay; 1 s keeps the verdict about the
// operator's order, not the machine's speed.
const restartReadyDelay = time.Second

// startDataPlane runs fakes/dataplane (kubelet + GC) for namespaces only, restarting a pod in place when
// its config suffix changes; a restarted pod is Ready again after ready.
func startDataPlane(t *testing.T, ready time.Duration, namespaces ...string) *dataplane.DataPlane {
	t.Helper()
	dp := dataplane.New(dataplane.Options{
		RestartAnnotations: []string{matrixone.AnnotationConfigSuffix},
		ReadyDelay:         ready,
	})
	scope := map[string]cache.Config{}
	for _, ns := range namespaces {
		scope[ns] = cache.Config{}
	}
	runManager(t, ctrl.Options{Cache: cache.Options{DefaultNamespaces: scope}}, dp.SetupWithManager)
	return dp
}

// startOperator runs the three pod-set controllers with opts scaled by 0.01, in a manager scoped as
// opts.ManagerScope says (leader election off).
func startOperator(t *testing.T, opts matrixone.Options) (stop func()) {
	t.Helper()
	cacheOpts, _ := opts.ManagerScope()
	opts = opts.Scaled(0.01)
	return runManager(t, ctrl.Options{Cache: cacheOpts}, func(mgr ctrl.Manager) error {
		for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
			&matrixone.LogSetReconciler{Options: opts},
			&matrixone.DNSetReconciler{Options: opts},
			&matrixone.ProxySetReconciler{Options: opts},
		} {
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
		}
		return nil
	})
}

// operatorOptions returns the catalog defaults with the rolling-restart and unscoped switches, the scope and
// the config revision set.
func operatorOptions(watchNamespace, revision string, concurrentRestart, unscoped bool) matrixone.Options {
	o := matrixone.DefaultOptions()
	o.Live[matrixone.DefectConcurrentRollingRestart] = concurrentRestart
	o.Live[matrixone.DefectUnscopedOperator] = unscoped
	o.WatchNamespace = watchNamespace
	o.ConfigRevision = revision
	return o
}

// The names of the test cluster's sets.
const (
	logSetName   = "mo-log"
	dnSetName    = "mo-dn"
	proxySetName = "mo-proxy"
)

func newLogSet(ns string, replicas int32) *mov1.LogSet {
	return &mov1.LogSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: logSetName},
		Spec: mov1.LogSetSpec{PodSetSpec: mov1.PodSetSpec{Replicas: replicas}}}
}

func newDNSet(ns string, replicas int32) *mov1.DNSet {
	return &mov1.DNSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dnSetName},
		Spec: mov1.DNSetSpec{PodSetSpec: mov1.PodSetSpec{Replicas: replicas}, Deps: mov1.PodSetDeps{LogSet: logSetName}}}
}

func newProxySet(ns string, replicas int32) *mov1.ProxySet {
	return &mov1.ProxySet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: proxySetName},
		Spec: mov1.ProxySetSpec{PodSetSpec: mov1.PodSetSpec{Replicas: replicas, Config: map[string]string{"proxy.rebalance": "true"}},
			Deps: mov1.PodSetDeps{LogSet: logSetName}}}
}

// createCluster creates a LogSet, a DNSet and a ProxySet, each with replicas pods.
func createCluster(t *testing.T, ns string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{newLogSet(ns, replicas), newDNSet(ns, replicas), newProxySet(ns, replicas)} {
		if err := envClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// expectedDigests renders the digest each set of the test cluster in ns should run under revision.
func expectedDigests(ns, revision string) map[string]string {
	disc := matrixone.DiscoveryAddress(ns, logSetName)
	return map[string]string{
		logSetName: matrixone.ConfigDigest(matrixone.RenderConfig(matrixone.ComponentLogSet, nil, revision, "")),
		dnSetName:  matrixone.ConfigDigest(matrixone.RenderConfig(matrixone.ComponentDNSet, nil, revision, disc)),
		proxySetName: matrixone.ConfigDigest(matrixone.RenderConfig(matrixone.ComponentProxySet,
			newProxySet(ns, 0).Spec.Config, revision, disc)),
	}
}

// setState is a set's generation and status.
type setState struct {
	gen int64
	st  mov1.PodSetStatus
}

// setStatuses returns the generation and status of each set of the test cluster in ns.
func setStatuses(g Gomega, ns string) map[string]setState {
	ctx := context.Background()
	ls, dn, px := &mov1.LogSet{}, &mov1.DNSet{}, &mov1.ProxySet{}
	g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: logSetName}, ls)).To(Succeed())
	g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: dnSetName}, dn)).To(Succeed())
	g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: proxySetName}, px)).To(Succeed())
	return map[string]setState{
		logSetName:   {ls.Generation, ls.Status.PodSetStatus},
		dnSetName:    {dn.Generation, dn.Status.PodSetStatus},
		proxySetName: {px.Generation, px.Status.PodSetStatus},
	}
}

// expectClusterReady checks that every set of the test cluster in ns is Ready with replicas pods on the
// config of revision, and that each ConfigMap holds exactly start.sh and that config.
func expectClusterReady(g Gomega, ns, revision string, replicas int32) {
	ctx := context.Background()
	want := expectedDigests(ns, revision)
	for name, s := range setStatuses(g, ns) {
		g.Expect(s.st.IsReady()).To(BeTrue(), "%s not Ready: %+v", name, s.st)
		g.Expect(s.st.ConfigSuffix).To(Equal(want[name]), name)
		g.Expect(s.st.ObservedGeneration).To(Equal(s.gen), name)
		g.Expect(s.st.ReadyReplicas).To(Equal(replicas), name)
		cm := &corev1.ConfigMap{}
		g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: matrixone.ConfigMapName(name)}, cm)).To(Succeed())
		g.Expect(slices.Sorted(maps.Keys(cm.Data))).To(ConsistOf(matrixone.EntrypointKey, matrixone.ConfigKey(want[name])), name)
	}
	pods := &corev1.PodList{}
	g.Expect(envClient.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(3 * int(replicas)))
	for _, p := range pods.Items {
		g.Expect(p.Annotations[matrixone.AnnotationConfigSuffix]).To(Equal(want[p.Labels[matrixone.LabelInstance]]), p.Name)
	}
}

func TestPodSetValidation(t *testing.T) {
	requireEnvtest(t)
	ctx := context.Background()
	ns := newNamespace(t, "mo-val-")
	bad := []client.Object{
		&mov1.LogSet{ObjectMeta: metav1.ObjectMeta{Name: "neg"}, Spec: mov1.LogSetSpec{PodSetSpec: mov1.PodSetSpec{Replicas: -1}}},
		&mov1.LogSet{ObjectMeta: metav1.ObjectMeta{Name: "key"}, Spec: mov1.LogSetSpec{PodSetSpec: mov1.PodSetSpec{
			Replicas: 1, Config: map[string]string{"bad key": "x"}}}},
		&mov1.DNSet{ObjectMeta: metav1.ObjectMeta{Name: "nodeps"}, Spec: mov1.DNSetSpec{PodSetSpec: mov1.PodSetSpec{Replicas: 1}}},
		&mov1.ProxySet{ObjectMeta: metav1.ObjectMeta{Name: "many"}, Spec: mov1.ProxySetSpec{
			PodSetSpec: mov1.PodSetSpec{Replicas: 17}, Deps: mov1.PodSetDeps{LogSet: "ls"}}},
	}
	for _, o := range bad {
		o.SetNamespace(ns)
		if err := envClient.Create(ctx, o); !apierrors.IsInvalid(err) {
			t.Errorf("%T %s: want Invalid, got %v", o, o.GetName(), err)
		}
	}
	good := newDNSet(ns, 0)
	good.Spec.Config = map[string]string{"a.b-c_d": "x"}
	if err := envClient.Create(ctx, good); err != nil {
		t.Errorf("valid DNSet rejected: %v", err)
	}
}

func TestPodSetsUpScaleDelete(t *testing.T) {
	requireEnvtest(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t, "mo-up-")
	dp := startDataPlane(t, readyDelay, ns)
	startOperator(t, operatorOptions(ns, "r1", true, false))

	// DNSet and ProxySet first: they wait for their LogSet (no finalizer, no ConfigMap, no pods).
	g.Expect(envClient.Create(ctx, newDNSet(ns, 2))).To(Succeed())
	g.Expect(envClient.Create(ctx, newProxySet(ns, 2))).To(Succeed())
	g.Consistently(func(g Gomega) {
		pods, cms, dn := &corev1.PodList{}, &corev1.ConfigMapList{}, &mov1.DNSet{}
		g.Expect(envClient.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
		g.Expect(envClient.List(ctx, cms, client.InNamespace(ns), client.HasLabels{matrixone.LabelInstance})).To(Succeed())
		g.Expect(cms.Items).To(BeEmpty())
		g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: dnSetName}, dn)).To(Succeed())
		g.Expect(dn.Finalizers).To(BeEmpty())
	}).WithTimeout(400 * time.Millisecond).Should(Succeed())

	g.Expect(envClient.Create(ctx, newLogSet(ns, 3))).To(Succeed())
	g.Eventually(func(g Gomega) {
		ls := &mov1.LogSet{}
		g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: logSetName}, ls)).To(Succeed())
		g.Expect(ls.Status.IsReady()).To(BeTrue())
		g.Expect(ls.Status.ReadyReplicas).To(BeEquivalentTo(3))
		g.Expect(ls.Status.Discovery).To(Equal(ns + "/" + logSetName))
		for name, s := range setStatuses(g, ns) {
			g.Expect(s.st.IsReady()).To(BeTrue(), name)
			g.Expect(s.st.ConfigSuffix).To(Equal(expectedDigests(ns, "r1")[name]), name)
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Quiet once Ready: no object of the namespace changes.
	quiet := nsFingerprint(g, dp, ns)
	g.Consistently(func(g Gomega) { g.Expect(nsFingerprint(g, dp, ns)).To(Equal(quiet)) }).
		WithTimeout(500 * time.Millisecond).WithPolling(50 * time.Millisecond).Should(Succeed())

	// Objects as the real operator shapes them.
	ls, dn := &mov1.LogSet{}, &mov1.DNSet{}
	g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: logSetName}, ls)).To(Succeed())
	g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: dnSetName}, dn)).To(Succeed())
	g.Expect(ls.Finalizers).To(ConsistOf(matrixone.FinalizerPrefix + matrixone.LogSetControllerName))
	g.Expect(dn.Finalizers).To(ConsistOf(matrixone.FinalizerPrefix + matrixone.DNSetControllerName))
	cm := &corev1.ConfigMap{}
	g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mo-dn-config"}, cm)).To(Succeed())
	g.Expect(cm.Data["config.toml-"+dn.Status.ConfigSuffix]).To(ContainSubstring(`hakeeper-client.discovery-address = "` + ns + `/mo-log"`))
	g.Expect(cm.Data["start.sh"]).To(ContainSubstring("CONFIG_SUFFIX"))
	g.Expect(metav1.IsControlledBy(cm, dn)).To(BeTrue())
	pod := &corev1.Pod{}
	g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mo-log-2"}, pod)).To(Succeed())
	g.Expect(pod.Labels).To(Equal(map[string]string{matrixone.LabelComponent: matrixone.ComponentLogSet, matrixone.LabelInstance: logSetName}))
	g.Expect(pod.Annotations[matrixone.AnnotationConfigSuffix]).To(Equal(ls.Status.ConfigSuffix))
	g.Expect(metav1.IsControlledBy(pod, ls)).To(BeTrue())

	// Every write carries a declared field owner: no manager named after the operator's User-Agent.
	declared := []string{matrixone.FieldOwner, dataplane.DefaultFieldOwner, "ensemble-test"}
	pods := &corev1.PodList{}
	g.Expect(envClient.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
	objs := []client.Object{ls, dn, cm}
	for i := range pods.Items {
		objs = append(objs, &pods.Items[i])
	}
	for _, o := range objs {
		for _, mf := range o.GetManagedFields() {
			g.Expect(declared).To(ContainElement(mf.Manager), "%s %s", o.GetName(), mf.Manager)
		}
	}

	// Scale the LogSet in: the extra pods go, the set is Ready again.
	g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: logSetName}, ls)).To(Succeed())
	ls.Spec.Replicas = 1
	g.Expect(envClient.Update(ctx, ls)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &mov1.LogSet{}
		g.Expect(envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: logSetName}, got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Status.IsReady()).To(BeTrue())
		g.Expect(envClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{matrixone.LabelInstance: logSetName})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(1))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Delete the DNSet: its pods and ConfigMap go, then the finalizer, then the object.
	g.Expect(envClient.Delete(ctx, dn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: dnSetName}, &mov1.DNSet{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "DNSet still there: %v", err)
		g.Expect(envClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{matrixone.LabelInstance: dnSetName})).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
		err = envClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mo-dn-config"}, &corev1.ConfigMap{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// restartWindow is one pod's in-place restart as the dataplane logged it: when it went down (restarts=1,
// not ready) and when it was Ready again.
type restartWindow struct {
	pod           string
	down, readyAt time.Time
}

// restartWindows reads the first restart of each pod of ns from the dataplane's write log.
func restartWindows(dp *dataplane.DataPlane, ns string) map[string]restartWindow {
	out := map[string]restartWindow{}
	for _, e := range dp.Log(ns) {
		if e.Kind != "Pod" || e.Op != "status" || e.Err != "" || !strings.HasSuffix(e.Detail, " restarts=1") {
			continue
		}
		w := out[e.Name]
		w.pod = e.Name
		switch {
		case strings.Contains(e.Detail, "ready=False") && w.down.IsZero():
			w.down = e.Time
		case strings.Contains(e.Detail, "ready=True") && !w.down.IsZero() && w.readyAt.IsZero():
			w.readyAt = e.Time
		}
		out[e.Name] = w
	}
	return out
}

// componentWindow spans the restarts of one set's pods: first down to last Ready again.
func componentWindow(ws map[string]restartWindow, set string, replicas int) (start, end time.Time) {
	for i := range replicas {
		w := ws[matrixone.PodSetPodName(set, i)]
		if start.IsZero() || w.down.Before(start) {
			start = w.down
		}
		if w.readyAt.After(end) {
			end = w.readyAt
		}
	}
	return start, end
}

// TestConfigRevisionRestart upgrades the operator (a new ConfigRevision, so every config renders a new
// digest) under a running cluster and checks that every pod restarts in place exactly once: all together
// with MO-CONCURRENT-ROLLING-RESTART live, component by component and pod by pod when fixed.
func TestConfigRevisionRestart(t *testing.T) {
	for _, live := range []bool{true, false} {
		t.Run(fmt.Sprint("live=", live), func(t *testing.T) {
			requireEnvtest(t)
			g := NewWithT(t)
			ctx := context.Background()
			const replicas = 2
			ns := newNamespace(t, "mo-roll-")
			dp := startDataPlane(t, restartReadyDelay, ns)
			stop := startOperator(t, operatorOptions(ns, "r1", live, false))
			createCluster(t, ns, replicas)
			g.Eventually(func(g Gomega) { expectClusterReady(g, ns, "r1", replicas) }).
				WithTimeout(30 * time.Second).Should(Succeed())
			pods := &corev1.PodList{}
			g.Expect(envClient.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
			uids := map[string]string{}
			for _, p := range pods.Items {
				uids[p.Name] = string(p.UID)
				g.Expect(dp.RestartCount(ns, p.Name)).To(BeZero(), p.Name)
			}

			// The upgrade: the old operator stops, the new one (revision r2) starts.
			stop()
			startOperator(t, operatorOptions(ns, "r2", live, false))
			g.Eventually(func(g Gomega) {
				expectClusterReady(g, ns, "r2", replicas)
				for name := range uids {
					g.Expect(dp.RestartCount(ns, name)).To(BeEquivalentTo(1), name)
				}
			}).WithTimeout(30 * time.Second).Should(Succeed())
			// Exactly once: the counts stay at 1, the pods are the same pods.
			g.Consistently(func(g Gomega) {
				for name := range uids {
					g.Expect(dp.RestartCount(ns, name)).To(BeEquivalentTo(1), name)
				}
			}).WithTimeout(3 * restartReadyDelay).Should(Succeed())
			g.Expect(envClient.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
			for _, p := range pods.Items {
				g.Expect(string(p.UID)).To(Equal(uids[p.Name]), p.Name)
			}

			ws := restartWindows(dp, ns)
			type span struct{ start, end time.Time }
			spans := map[string]span{}
			for _, set := range []string{logSetName, dnSetName, proxySetName} {
				s, e := componentWindow(ws, set, replicas)
				spans[set] = span{s, e}
				for i := range replicas {
					w := ws[matrixone.PodSetPodName(set, i)]
					g.Expect(w.down.IsZero() || w.readyAt.IsZero()).To(BeFalse(), "no restart window for %s: %+v", w.pod, w)
				}
				t.Logf("%-9s restarts %s .. %s", set, s.Format("15:04:05.000"), e.Format("15:04:05.000"))
			}
			overlap := func(a, b string) bool {
				return spans[a].start.Before(spans[b].end) && spans[b].start.Before(spans[a].end)
			}
			if live {
				// Every set restarts all its pods at once, and the components' restarts overlap.
				for _, set := range []string{logSetName, dnSetName, proxySetName} {
					last, firstReady := time.Time{}, time.Time{}
					for i := range replicas {
						w := ws[matrixone.PodSetPodName(set, i)]
						if w.down.After(last) {
							last = w.down
						}
						if firstReady.IsZero() || w.readyAt.Before(firstReady) {
							firstReady = w.readyAt
						}
					}
					g.Expect(last.Before(firstReady)).To(BeTrue(), "%s: pods did not restart together", set)
				}
				all := overlap(logSetName, dnSetName) && overlap(dnSetName, proxySetName) && overlap(logSetName, proxySetName)
				t.Logf("all three components restarting at once: %v", all)
				g.Expect(overlap(logSetName, dnSetName) || overlap(logSetName, proxySetName) || overlap(dnSetName, proxySetName)).
					To(BeTrue(), "no two components restarted together: %v", spans)
				return
			}
			// Fixed: LogSet, then DNSet, then ProxySet, never overlapping; inside a set one pod at a time.
			g.Expect(spans[dnSetName].start.After(spans[logSetName].end)).To(BeTrue(), "DNSet restarted before the LogSet was back")
			g.Expect(spans[proxySetName].start.After(spans[dnSetName].end)).To(BeTrue(), "ProxySet restarted before the DNSet was back")
			for _, set := range []string{logSetName, dnSetName, proxySetName} {
				for i := 1; i < replicas; i++ {
					prev, cur := ws[matrixone.PodSetPodName(set, i-1)], ws[matrixone.PodSetPodName(set, i)]
					g.Expect(cur.down.After(prev.readyAt)).To(BeTrue(), "%s restarted before %s was Ready again", cur.pod, prev.pod)
				}
			}
		})
	}
}

// nsFingerprint maps every pod-set object, ConfigMap and pod of ns to its resourceVersion (pods also to
// their UID and config suffix), plus each pod's restart count.
func nsFingerprint(g Gomega, dp *dataplane.DataPlane, ns string) map[string]string {
	ctx := context.Background()
	out := map[string]string{}
	lists := []client.ObjectList{&mov1.LogSetList{}, &mov1.DNSetList{}, &mov1.ProxySetList{}, &corev1.ConfigMapList{}, &corev1.PodList{}}
	for _, l := range lists {
		g.Expect(envClient.List(ctx, l, client.InNamespace(ns))).To(Succeed())
	}
	for _, l := range lists {
		items, err := metaItems(l)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range items {
			k := fmt.Sprintf("%T/%s", o, o.GetName())
			out[k] = o.GetResourceVersion()
			if p, ok := o.(*corev1.Pod); ok {
				out[k] += fmt.Sprintf(" uid=%s suffix=%s restarts=%d", p.UID, p.Annotations[matrixone.AnnotationConfigSuffix],
					dp.RestartCount(ns, p.Name))
			}
		}
	}
	return out
}

// metaItems returns the items of a typed list as client.Objects.
func metaItems(l client.ObjectList) ([]client.Object, error) {
	var out []client.Object
	switch l := l.(type) {
	case *mov1.LogSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *mov1.DNSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *mov1.ProxySetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ConfigMapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.PodList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("unexpected list %T", l)
	}
	return out, nil
}

// watchConfigKeys records the successive config keys (start.sh left out) of ConfigMap ns/name until ctx ends.
func watchConfigKeys(t *testing.T, ctx context.Context, ns, name string) func() [][]string {
	t.Helper()
	w, err := envClient.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seq [][]string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || cm.Name != name || ev.Type == watch.Deleted {
				continue
			}
			var keys []string
			for k := range cm.Data {
				if k != matrixone.EntrypointKey {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			mu.Lock()
			if len(seq) == 0 || !slices.Equal(seq[len(seq)-1], keys) {
				seq = append(seq, keys)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seq)
	}
}

// TestUnscopedOperator: a sentinel cluster runs in ns2 (brought up by its own ns2-scoped operator, then
// left alone). A test operator with another ConfigRevision and WatchNamespace=ns1 never touches it; the same
// operator with MO-UNSCOPED-OPERATOR live reconciles ns2 too: the sentinel's ConfigMap keys go
// {a} -> {a, b} -> {b}, its pods change suffix and restart in place (same UIDs).
func TestUnscopedOperator(t *testing.T) {
	requireEnvtest(t)
	g := NewWithT(t)
	ctx := context.Background()
	const replicas = 2
	ns1, ns2 := newNamespace(t, "mo-test-"), newNamespace(t, "mo-sentinel-")
	dp := startDataPlane(t, readyDelay, ns1, ns2)

	sentinel := operatorOptions(ns2, "r1", false, false)
	sentinel.LeaderElectionID = "sentinel.matrixorigin.io"
	stopSentinel := startOperator(t, sentinel)
	createCluster(t, ns2, replicas)
	g.Eventually(func(g Gomega) { expectClusterReady(g, ns2, "r1", replicas) }).WithTimeout(30 * time.Second).Should(Succeed())
	stopSentinel()
	before := nsFingerprint(g, dp, ns2)

	// Scoped (defect fixed): ns1's cluster comes up on r2, ns2 stays exactly as it was.
	stopScoped := startOperator(t, operatorOptions(ns1, "r2", false, false))
	createCluster(t, ns1, replicas)
	g.Eventually(func(g Gomega) { expectClusterReady(g, ns1, "r2", replicas) }).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) { g.Expect(nsFingerprint(g, dp, ns2)).To(Equal(before)) }).
		WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	stopScoped()

	// Unscoped (defect live): the same options reconcile ns2 as well.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	keys := watchConfigKeys(t, wctx, ns2, matrixone.ConfigMapName(logSetName))
	startOperator(t, operatorOptions(ns1, "r2", false, true))
	g.Eventually(func(g Gomega) {
		expectClusterReady(g, ns2, "r2", replicas)
		pods := &corev1.PodList{}
		g.Expect(envClient.List(ctx, pods, client.InNamespace(ns2))).To(Succeed())
		for _, p := range pods.Items {
			g.Expect(dp.RestartCount(ns2, p.Name)).To(BeEquivalentTo(1), p.Name)
			g.Expect(before[fmt.Sprintf("%T/%s", &p, p.Name)]).To(ContainSubstring("uid="+string(p.UID)), "pod %s replaced, not restarted", p.Name)
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())
	a, b := matrixone.ConfigKey(expectedDigests(ns2, "r1")[logSetName]), matrixone.ConfigKey(expectedDigests(ns2, "r2")[logSetName])
	g.Eventually(keys).Should(Equal([][]string{{a}, slices.Sorted(slices.Values([]string{a, b})), {b}}))
}
