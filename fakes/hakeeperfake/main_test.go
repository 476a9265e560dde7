package hakeeperfake_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ensembletest/ensemble/fakes/dataplane"
	fakehk "github.com/ensembletest/ensemble/fakes/hakeeperfake"
	"github.com/ensembletest/ensemble/internal/passcount"
	"github.com/ensembletest/ensemble/internal/planetest"
	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	hk "github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

// The CN process simulator and the migrator against a real API server (CRDs of the MatrixOne operator),
// with fakes/dataplane as the kubelet and no operator: the tests create pods and claims by hand. Skipped
// with -short.

var (
	restCfg *rest.Config
	scheme  = runtime.NewScheme()
	k8s     client.Client
)

func TestMain(m *testing.M) {
	os.Exit(planetest.Run(m, planetest.Options{
		SkipShort: true, // the tests skip themselves under -short (restCfg nil)
		CRDs:      []string{filepath.Join("..", "..", "operators", "matrixone", "config", "crd")},
		Setup: func(plane *rest.Config) (func() error, error) {
			_ = clientgoscheme.AddToScheme(scheme)
			_ = mov1.AddToScheme(scheme)
			cfg := rest.CopyConfig(plane)
			cfg.UserAgent = "ensemble-test/v0"
			var err error
			if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
				return nil, err
			}
			restCfg = cfg
			return nil, nil
		},
	}))
}

// start creates a namespace and runs a manager scoped to it with the data plane and reg's simulator, and
// returns the simulator's pass counter.
func start(t *testing.T, reg *fakehk.Registry) (context.Context, string, *passcount.Counter) {
	t.Helper()
	if restCfg == nil {
		t.Skip("-short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "hk-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	count := &passcount.Counter{}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns.Name: {}}},
		Controller: config.Controller{SkipNameValidation: new(true)},
		Logger:     count.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := dataplane.New(dataplane.Options{}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx, ns.Name, count
}

func logSet(ns string) *mov1.LogSet {
	return &mov1.LogSet{ObjectMeta: metav1.ObjectMeta{Name: "mo", Namespace: ns},
		Spec: mov1.LogSetSpec{PodSetSpec: mov1.PodSetSpec{Replicas: 1}}}
}

func pool(ns string) *mov1.CNPool {
	return &mov1.CNPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: mov1.CNPoolSpec{Deps: mov1.CNPoolDeps{LogSet: "mo"}}}
}

func cnPod(ns, name, poolName string) *corev1.Pod {
	l := map[string]string{fakehk.LabelComponent: fakehk.ComponentCN}
	if poolName != "" {
		l[fakehk.LabelPoolName] = poolName
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: corev1.PodSpec{Subdomain: "pool", Containers: []corev1.Container{{Name: "main", Image: "mo"}}}}
}

func markReady(ctx context.Context, g Gomega, ls *mov1.LogSet) {
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ls), ls)).To(Succeed())
	ls.Status.Conditions = []metav1.Condition{{Type: mov1.ConditionTypeReady, Status: metav1.ConditionTrue,
		Reason: "Test", Message: "marked by hand", LastTransitionTime: metav1.Now()}}
	ls.Status.Discovery = ls.Namespace + "/" + ls.Name
	g.Expect(k8s.Status().Update(ctx, ls)).To(Succeed())
}

func TestSimRegistersOnceLogSetReadyAndPodRuns(t *testing.T) {
	g := NewWithT(t)
	reg := fakehk.New(fakehk.Options{})
	ctx, ns, count := start(t, reg)
	ls := logSet(ns)
	g.Expect(k8s.Create(ctx, ls)).To(Succeed())
	g.Expect(k8s.Create(ctx, pool(ns))).To(Succeed())
	g.Expect(k8s.Create(ctx, cnPod(ns, "cn-1", "pool"))).To(Succeed())
	uuid := hk.StoreUUID(ns, "cn-1", "pool")

	// The pod runs, but the LogSet is not Ready: no instance, no store; the CN process keeps retrying.
	g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cn-1"}, p)).To(Succeed())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(count.Get(fakehk.ControllerName, "cn-1")).To(BeNumerically(">=", 3))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	g.Expect(reg.HasInstance(ns, "mo")).To(BeFalse())
	_, err := reg.Instance(ctx, ns, "mo")
	g.Expect(err).To(MatchError(hk.ErrNoInstance))

	markReady(ctx, g, ls)
	g.Eventually(func(g Gomega) {
		st, ok := reg.Store(ns, uuid)
		g.Expect(ok).To(BeTrue())
		g.Expect(st.PodName).To(Equal("cn-1"))
		g.Expect(st.WorkState).To(Equal(hk.WorkStateWorking))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	in, err := reg.Instance(ctx, ns, "mo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.(*fakehk.Instance).Discovery()).To(Equal(ns + "/mo"))

	// Dropped registrations: a new pod does not get in until the fault is off.
	reg.DropRegistrations(ns, true)
	g.Expect(k8s.Create(ctx, cnPod(ns, "cn-2", "pool"))).To(Succeed())
	uuid2 := hk.StoreUUID(ns, "cn-2", "pool")
	g.Eventually(func() int {
		n := 0
		for _, c := range reg.Log(ns) {
			if c.Op == fakehk.OpRegister && c.UUID == uuid2 && c.Result == "dropped" {
				n++
			}
		}
		return n
	}).WithTimeout(10 * time.Second).Should(BeNumerically(">=", 2))
	_, ok := reg.Store(ns, uuid2)
	g.Expect(ok).To(BeFalse())
	reg.DropRegistrations(ns, false)
	reg.Kick(ns)
	g.Eventually(func() bool { _, ok := reg.Store(ns, uuid2); return ok }).WithTimeout(10 * time.Second).Should(BeTrue())

	// A pod without a pool registers in the namespace's only instance.
	g.Expect(k8s.Create(ctx, cnPod(ns, "cn-3", ""))).To(Succeed())
	g.Eventually(func() bool { _, ok := reg.PodStore(ns, "cn-3"); return ok }).WithTimeout(10 * time.Second).Should(BeTrue())

	// Deleting a pod removes nothing: that is the operator's job (DeleteCNStore).
	g.Expect(k8s.Delete(ctx, cnPod(ns, "cn-1", "pool"))).To(Succeed())
	g.Eventually(func() bool {
		return k8sGone(ctx, ns, "cn-1")
	}).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Consistently(func() bool { _, ok := reg.Store(ns, uuid); return ok }).
		WithTimeout(200 * time.Millisecond).Should(BeTrue())
}

func TestMigrateAgainstAPIServer(t *testing.T) {
	g := NewWithT(t)
	reg := fakehk.New(fakehk.Options{})
	ctx, ns, _ := start(t, reg)
	mk := func(name, phase, claimedBy string) {
		p := cnPod(ns, name, "pool")
		p.Labels[fakehk.LabelPhase] = phase
		if claimedBy != "" {
			p.Labels[fakehk.LabelClaimedBy] = claimedBy
		}
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
	}
	mk("p1", "Bound", "a")
	mk("p2", "Bound", "b")
	mk("p3", "Idle", "")
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cn"}}
	for name, podName := range map[string]string{"a": "p1", "b": "p2"} {
		c := &mov1.CNClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: mov1.CNClaimSpec{PodName: podName, PoolName: "pool", Selector: sel}}
		g.Expect(k8s.Create(ctx, c)).To(Succeed())
	}
	target, err := reg.Migrate(ctx, k8s, types.NamespacedName{Namespace: ns, Name: "b"}, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(target).To(Equal("p3"))
	b := &mov1.CNClaim{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "b"}, b)).To(Succeed())
	g.Expect(b.Spec.PodName).To(Equal("p3"))
	g.Expect(b.Spec.SourcePod).To(Equal(&mov1.CNClaimSourcePod{PodName: "p2"}))
	var managers []string
	for _, mf := range b.ManagedFields {
		managers = append(managers, mf.Manager)
	}
	g.Expect(managers).To(ContainElement(fakehk.MigratorFieldOwner))

	_, err = reg.Migrate(ctx, k8s, types.NamespacedName{Namespace: ns, Name: "b"}, true)
	g.Expect(err).To(MatchError(fakehk.ErrMigrating))
	target, err = fakehk.Migrate(ctx, k8s, types.NamespacedName{Namespace: ns, Name: "a"}, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(target).To(BeElementOf("p2", "p3"), "live: a pod another claim uses")
	g.Expect(reg.Calls(ns)[fakehk.OpMigrate]).To(Equal(2))
}

func k8sGone(ctx context.Context, ns, name string) bool {
	err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
	return client.IgnoreNotFound(err) == nil && err != nil
}
