package multigres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ensembletest/ensemble/internal/planetest"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
)

// A smoke test of the operator against a real API server: CRDs install and validate, a cluster fans out and
// becomes Healthy with a tiny in-test kubelet and topology, the deletion chain completes, and the defective
// paths misbehave for real. Skipped without envtest binaries (tools/envtest/build.sh) or with -short.

var (
	restCfg *rest.Config
	scheme  = runtime.NewScheme()
	direct  client.Client
)

func TestMain(m *testing.M) {
	os.Exit(planetest.Run(m, planetest.Options{
		SkipShort: true, // envtest tests skip themselves under -short (restCfg nil)
		CRDs:      []string{filepath.Join("config", "crd")},
		Setup: func(cfg *rest.Config) (func() error, error) {
			_ = clientgoscheme.AddToScheme(scheme)
			_ = mgv1.AddToScheme(scheme)
			cfg.UserAgent = "mini-multigres/v0"
			restCfg = cfg
			var err error
			direct, err = client.New(cfg, client.Options{Scheme: scheme})
			return nil, err
		},
	}))
}

// memTopo is a tiny topology: poolers by name.
type memTopo struct {
	mu      sync.Mutex
	poolers map[string]*topo.Pooler // namespace/name
}

func (m *memTopo) RegisterCell(context.Context, string, string) error     { return nil }
func (m *memTopo) RegisterDatabase(context.Context, string, string) error { return nil }
func (m *memTopo) Poolers(_ context.Context, ns string, key topo.ShardKey) ([]topo.Pooler, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []topo.Pooler
	for k, p := range m.poolers {
		if strings.HasPrefix(k, ns+"/") && p.Key == key {
			out = append(out, *p)
		}
	}
	return out, nil
}
func (m *memTopo) SetLifecycle(_ context.Context, ns, name, lc string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.poolers[ns+"/"+name]; p != nil {
		p.Lifecycle = lc
	}
	return nil
}
func (m *memTopo) register(ns string, pod *corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.poolers == nil {
		m.poolers = map[string]*topo.Pooler{}
	}
	if _, ok := m.poolers[ns+"/"+pod.Name]; ok {
		return
	}
	role := topo.RoleReplica
	if strings.HasSuffix(pod.Name, "-0") {
		role = topo.RolePrimary
	}
	m.poolers[ns+"/"+pod.Name] = &topo.Pooler{
		Name: pod.Name, Cell: pod.Labels[multigres.LabelCell], Hostname: pod.Name, Role: role,
		Lifecycle: topo.LifecycleServing,
		Key: topo.ShardKey{Database: pod.Labels[multigres.LabelDatabase],
			TableGroup: pod.Labels[multigres.LabelTableGroup], Shard: pod.Labels[multigres.LabelShard]},
		Initialized: true, AcceptingConnections: true, CohortEligible: true, InCommittedCohort: true,
	}
}

// kubelet marks pods Ready when every readiness gate is True and registers a pooler per pool pod delay after
// it first sees the pod (a topology write: no Kubernetes event).
func kubelet(ctx context.Context, ns string, tp *memTopo, delay time.Duration) {
	seen := map[string]time.Time{}
	for ctx.Err() == nil {
		pods := &corev1.PodList{}
		if err := direct.List(ctx, pods, client.InNamespace(ns)); err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				if _, ok := seen[p.Name]; !ok {
					seen[p.Name] = time.Now()
				}
				if p.Labels[multigres.LabelComponent] == multigres.ComponentShardPool &&
					time.Since(seen[p.Name]) > delay {
					tp.register(ns, p)
				}
				ready := corev1.ConditionTrue
				for _, g := range p.Spec.ReadinessGates {
					c := findPodCond(p, g.ConditionType)
					if c == nil || c.Status != corev1.ConditionTrue {
						ready = corev1.ConditionFalse
					}
				}
				if c := findPodCond(p, corev1.PodReady); c != nil && c.Status == ready {
					continue
				}
				u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
					"phase": "Running",
					"conditions": []any{map[string]any{"type": "Ready", "status": string(ready),
						"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
				}}}
				u.SetAPIVersion("v1")
				u.SetKind("Pod")
				u.SetNamespace(ns)
				u.SetName(p.Name)
				_ = direct.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
					client.FieldOwner("test-kubelet"), client.ForceOwnership)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func findPodCond(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// start boots a namespace, the three controllers (scoped to it) with opts, the kubelet and the topology
// (poolers register 300 ms after their pod appears).
func start(t *testing.T, opts multigres.Options) (context.Context, string) {
	return startWith(t, opts, 300*time.Millisecond)
}

// startWith is start with the pooler registration delay.
func startWith(t *testing.T, opts multigres.Options, registerDelay time.Duration) (context.Context, string) {
	t.Helper()
	if restCfg == nil {
		t.Skip("no envtest binaries (tools/envtest/build.sh) or -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mg-"}}
	if err := direct.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns.Name: {}}},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	tp := &memTopo{}
	opts = opts.Scaled(0.01)
	for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
		&multigres.ClusterReconciler{Topo: tp, Options: opts},
		&multigres.TableGroupReconciler{Options: opts},
		&multigres.ShardReconciler{Topo: tp, Options: opts},
	} {
		if err := r.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{}, 2)
	go func() { _ = mgr.Start(ctx); done <- struct{}{} }()
	go func() { kubelet(ctx, ns.Name, tp, registerDelay); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return ctx, ns.Name
}

func storageClass(ctx context.Context, t *testing.T, name string) {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/none"}
	if err := direct.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func cluster(ns string, shard mgv1.ShardTemplate) *mgv1.MultigresCluster {
	return &mgv1.MultigresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "mg", Namespace: ns},
		Spec: mgv1.MultigresClusterSpec{Cells: []string{"z1"}, Databases: []mgv1.DatabaseSpec{{
			Name: "db", TableGroups: []mgv1.TableGroupTemplate{{Name: "default", Shards: []mgv1.ShardTemplate{shard}}},
		}}},
	}
}

func basicShard() mgv1.ShardTemplate {
	return mgv1.ShardTemplate{Name: "0-inf", Pools: map[string]mgv1.PoolSpec{
		"main": {Cells: []string{"z1"}, ReplicasPerCell: 2, StorageClass: "fast"},
	}}
}

const shardName = "mg-db-default-0-inf"

func getShard(g Gomega, ctx context.Context, ns string) *mgv1.Shard {
	s := &mgv1.Shard{}
	g.Expect(direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: shardName}, s)).To(Succeed())
	return s
}

func TestValidation(t *testing.T) {
	ctx, ns := start(t, multigres.DefaultOptions())
	bad := []*mgv1.Shard{
		{Spec: mgv1.ShardSpec{DatabaseName: "db", TableGroupName: "tg", ShardName: "s",
			Pools: map[string]mgv1.PoolSpec{"p": {Cells: []string{"z1"}, ReplicasPerCell: -1}}}},
		{Spec: mgv1.ShardSpec{DatabaseName: "db", TableGroupName: "tg", ShardName: "s",
			Pools: map[string]mgv1.PoolSpec{"Bad_Name": {Cells: []string{"z1"}, ReplicasPerCell: 1}}}},
		{Spec: mgv1.ShardSpec{DatabaseName: "", TableGroupName: "tg", ShardName: "s"}},
	}
	for i, s := range bad {
		s.Name, s.Namespace = fmt.Sprintf("bad-%d", i), ns
		if err := direct.Create(ctx, s); !apierrors.IsInvalid(err) {
			t.Errorf("shard %d: want Invalid, got %v", i, err)
		}
	}
	c := cluster(ns, basicShard())
	c.Spec.Cells = nil
	if err := direct.Create(ctx, c); !apierrors.IsInvalid(err) {
		t.Errorf("cluster without cells: want Invalid, got %v", err)
	}
}

func TestFanOutHealthyQuietAndDelete(t *testing.T) {
	g := NewWithT(t)
	ctx, ns := start(t, multigres.DefaultOptions())
	storageClass(ctx, t, "fast")
	g.Expect(direct.Create(ctx, cluster(ns, basicShard()))).To(Succeed())

	g.Eventually(func(g Gomega) {
		tg := &mgv1.TableGroup{}
		g.Expect(direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mg-db-default"}, tg)).To(Succeed())
		g.Expect(metav1.GetControllerOf(tg).Kind).To(Equal("MultigresCluster"))
		s := getShard(g, ctx, ns)
		g.Expect(metav1.GetControllerOf(s).Kind).To(Equal("TableGroup"))
		g.Expect(s.Finalizers).To(ContainElement(multigres.FinalizerShardPVCOrphan))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	g.Eventually(func(g Gomega) {
		s := getShard(g, ctx, ns)
		g.Expect(s.Status.Phase).To(Equal(mgv1.PhaseHealthy), "%+v", s.Status)
		g.Expect(s.Status.PodRoles).To(Equal(map[string]string{
			multigres.PoolPodName(shardName, "main", "z1", 0): topo.RolePrimary,
			multigres.PoolPodName(shardName, "main", "z1", 1): topo.RoleReplica,
		}))
		g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, mgv1.ConditionStorageClassValid)).To(BeTrue())
		c := &mgv1.MultigresCluster{}
		g.Expect(direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mg"}, c)).To(Succeed())
		g.Expect(c.Status.Phase).To(Equal(mgv1.PhaseHealthy))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Quiet: nothing in the namespace changes for a while once Healthy.
	before := fingerprint(g, ctx, ns)
	g.Consistently(func(g Gomega) map[string]string { return fingerprint(g, ctx, ns) }).
		WithTimeout(1500*time.Millisecond).Should(Equal(before), "a healthy cluster must be quiet")
	s := getShard(g, ctx, ns)

	// Every manager on the Shard and its pods is declared.
	declared := append(multigres.FieldOwners(), "test-kubelet")
	for _, mf := range s.ManagedFields {
		g.Expect(declared).To(ContainElement(mf.Manager))
	}
	pods := &corev1.PodList{}
	g.Expect(direct.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(3))
	for _, p := range pods.Items {
		g.Expect(metav1.GetControllerOf(&p).Name).To(Equal(shardName))
		for _, mf := range p.ManagedFields {
			g.Expect(declared).To(ContainElement(mf.Manager))
		}
	}

	// Scale down to one: pod 1 drains and goes; its pooler is shut down; podRoles loses it.
	c := &mgv1.MultigresCluster{}
	// The controllers write the cluster too (finalizer, status): retry the spec edit on a conflict.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mg"}, c); err != nil {
			return err
		}
		c.Spec.Databases[0].TableGroups[0].Shards[0].Pools["main"] = mgv1.PoolSpec{Cells: []string{"z1"}, ReplicasPerCell: 1, StorageClass: "fast"}
		return direct.Update(ctx, c)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := getShard(g, ctx, ns)
		g.Expect(s.Status.Phase).To(Equal(mgv1.PhaseHealthy))
		g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
		g.Expect(s.Status.PodRoles).To(HaveLen(1))
		p := &corev1.Pod{}
		err := direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: multigres.PoolPodName(shardName, "main", "z1", 1)}, p)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Rename the table group: the old one goes through both pending-deletion handshakes (cluster -> tablegroup,
	// tablegroup -> shard), the new one comes up.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mg"}, c); err != nil {
			return err
		}
		c.Spec.Databases[0].TableGroups[0].Name = "other"
		return direct.Update(ctx, c)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mg-db-default"}, &mgv1.TableGroup{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "old tablegroup still there")
		err = direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: shardName}, &mgv1.Shard{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "old shard still there")
		s := &mgv1.Shard{}
		g.Expect(direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mg-db-other-0-inf"}, s)).To(Succeed())
		g.Expect(s.Status.Phase).To(Equal(mgv1.PhaseHealthy))
		g.Expect(direct.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
		for _, p := range pods.Items {
			g.Expect(p.Name).To(HavePrefix("mg-db-other-0-inf-"))
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Delete: shard -> tablegroup -> cluster, all gone.
	g.Expect(direct.Delete(ctx, c)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mg"}, &mgv1.MultigresCluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		g.Expect(direct.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
		shards := &mgv1.ShardList{}
		g.Expect(direct.List(ctx, shards, client.InNamespace(ns))).To(Succeed())
		g.Expect(shards.Items).To(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// fingerprint maps every cluster, tablegroup, shard and pod of ns to its resourceVersion.
func fingerprint(g Gomega, ctx context.Context, ns string) map[string]string {
	out := map[string]string{}
	for _, l := range []client.ObjectList{&mgv1.MultigresClusterList{}, &mgv1.TableGroupList{}, &mgv1.ShardList{}, &corev1.PodList{}} {
		g.Expect(direct.List(ctx, l, client.InNamespace(ns))).To(Succeed())
		g.Expect(meta.EachListItem(l, func(o runtime.Object) error {
			m, _ := meta.Accessor(o)
			out[fmt.Sprintf("%T/%s", o, m.GetName())] = m.GetResourceVersion()
			return nil
		})).To(Succeed())
	}
	return out
}

// countChanges counts distinct values of f(shard) and resourceVersion bumps over d.
func countChanges(ctx context.Context, ns string, d time.Duration, f func(*mgv1.Shard) string) (values map[string]bool, bumps int) {
	values = map[string]bool{}
	last := ""
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		s := &mgv1.Shard{}
		if direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: shardName}, s) != nil {
			continue
		}
		values[f(s)] = true
		if s.ResourceVersion != last {
			bumps++
			last = s.ResourceVersion
		}
	}
	return values, bumps
}

// awaitFlaps waits (up to 20 s) until the shard's value f took two values and its resourceVersion moved more
// than minBumps times, and returns what it saw. A live flapping defect never stops, but a loaded machine
// runs fewer passes per second: a fixed window sampled 9 bumps where 10 were wanted under -race at load 7,
// so the live side is awaited, not sampled.
func awaitFlaps(t *testing.T, ctx context.Context, ns string, minBumps int, f func(*mgv1.Shard) string) (values map[string]bool, bumps int) {
	t.Helper()
	values = map[string]bool{}
	last := ""
	NewWithT(t).Eventually(func(g Gomega) {
		s := getShard(g, ctx, ns)
		values[f(s)] = true
		if s.ResourceVersion != last {
			bumps++
			last = s.ResourceVersion
		}
		g.Expect(values).To(HaveLen(2))
		g.Expect(bumps).To(BeNumerically(">", minBumps))
	}).WithTimeout(20*time.Second).WithPolling(5*time.Millisecond).Should(Succeed(), "the live defect did not flap")
	return values, bumps
}

// flapsIfLive checks the shard's value f (named what): live, it flaps (awaitFlaps, more than minBumps
// resourceVersions); fixed, it holds one value over 2 s.
func flapsIfLive(t *testing.T, ctx context.Context, ns string, live bool, minBumps int, what string, f func(*mgv1.Shard) string) {
	t.Helper()
	if live {
		vals, bumps := awaitFlaps(t, ctx, ns, minBumps, f)
		t.Logf("%s values %v, %d resourceVersions", what, vals, bumps)
		return
	}
	vals, bumps := countChanges(ctx, ns, 2*time.Second, f)
	t.Logf("%s values %v, %d resourceVersions in 2s", what, vals, bumps)
	if len(vals) != 1 {
		t.Errorf("live=false: %s values %v, %d bumps", what, vals, bumps)
	}
}

func healthyThen(t *testing.T, opts multigres.Options, shard mgv1.ShardTemplate) (context.Context, string) {
	g := NewWithT(t)
	ctx, ns := start(t, opts)
	storageClass(ctx, t, "fast")
	storageClass(ctx, t, "backup")
	g.Expect(direct.Create(ctx, cluster(ns, shard))).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := getShard(g, ctx, ns)
		g.Expect(s.Status.OrchReady).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return ctx, ns
}

// converged waits (up to 30 s) until the shard is Healthy with both pool pods in podRoles: the poolers have
// registered and the start-up is over, so what a test samples next is the steady state alone.
func converged(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		s := getShard(g, ctx, ns)
		g.Expect(s.Status.Phase).To(Equal(mgv1.PhaseHealthy))
		g.Expect(s.Status.PodRoles).To(HaveLen(2))
	}).WithTimeout(30*time.Second).Should(Succeed(),
		"the shard did not converge (Healthy, both pool pods in podRoles) within 30s")
}

func TestZeroFieldsFlips(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprint("live=", live), func(t *testing.T) {
			opts := multigres.DefaultOptions().WithDefect(multigres.DefectStatusSSAZeroFields, live)
			ctx, ns := healthyThen(t, opts, basicShard())
			converged(t, ctx, ns)
			orchReady := func(s *mgv1.Shard) string { return fmt.Sprint(s.Status.OrchReady) }
			flapsIfLive(t, ctx, ns, live, 10, "orchReady", orchReady)
		})
	}
}

func TestSplitWritersFlap(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprint("live=", live), func(t *testing.T) {
			opts := multigres.DefaultOptions().WithDefect(multigres.DefectStorageClassSplitWriters, live)
			sh := basicShard()
			sh.BackupStorageClass = "backup"
			ctx, ns := healthyThen(t, opts, sh)
			converged(t, ctx, ns)
			message := func(s *mgv1.Shard) string {
				if c := meta.FindStatusCondition(s.Status.Conditions, mgv1.ConditionStorageClassValid); c != nil {
					return c.Message
				}
				return ""
			}
			flapsIfLive(t, ctx, ns, live, 0, "StorageClassValid message", message)
		})
	}
}

// TestMapOrderMessage: with MG-CONDITION-MAP-ORDER live the StorageClassValid message names the missing
// classes in map order, so it takes both orders; fixed, it keeps one. The live case waits (up to 20 s) until
// both orders were seen rather than sampling a fixed window: a loaded machine runs fewer passes per second.
func TestMapOrderMessage(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprint("live=", live), func(t *testing.T) {
			g := NewWithT(t)
			ctx, ns := start(t, multigres.DefaultOptions().WithDefect(multigres.DefectConditionMapOrder, live))
			storageClass(ctx, t, "fast") // the main pool's class exists: only missing-a and missing-b are named
			sh := basicShard()
			sh.Pools["aa"] = mgv1.PoolSpec{Cells: []string{"z1"}, ReplicasPerCell: 1, StorageClass: "missing-a"}
			sh.Pools["bb"] = mgv1.PoolSpec{Cells: []string{"z1"}, ReplicasPerCell: 1, StorageClass: "missing-b"}
			g.Expect(direct.Create(ctx, cluster(ns, sh))).To(Succeed())
			msg := func(s *mgv1.Shard) string {
				if c := meta.FindStatusCondition(s.Status.Conditions, mgv1.ConditionStorageClassValid); c != nil {
					return c.Message
				}
				return ""
			}
			g.Eventually(func(g Gomega) { g.Expect(msg(getShard(g, ctx, ns))).To(ContainSubstring("missing-")) }).
				WithTimeout(30 * time.Second).Should(Succeed())
			vals := map[string]bool{}
			if live {
				g.Eventually(func(g Gomega) map[string]bool {
					if m := msg(getShard(g, ctx, ns)); m != "" {
						vals[m] = true
					}
					return vals
				}).WithTimeout(20*time.Second).WithPolling(5*time.Millisecond).Should(HaveLen(2),
					"MG-CONDITION-MAP-ORDER live: the message never took the other order")
			} else {
				vals, _ = countChanges(ctx, ns, 2*time.Second, msg)
				delete(vals, "")
			}
			t.Logf("messages %v", vals)
			if live != (len(vals) == 2) {
				t.Errorf("live=%v: messages %v", live, vals)
			}
			for v := range vals {
				g.Expect(v).To(SatisfyAll(ContainSubstring("missing-a"), ContainSubstring("missing-b")))
			}
		})
	}
}

func TestUnnamedFieldOwner(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprint("live=", live), func(t *testing.T) {
			g := NewWithT(t)
			opts := multigres.DefaultOptions().WithDefect(multigres.DefectUnnamedFieldOwner, live)
			ctx, ns := start(t, opts)
			storageClass(ctx, t, "fast")
			g.Expect(direct.Create(ctx, cluster(ns, basicShard()))).To(Succeed())
			converged(t, ctx, ns)
			podRolesOwners := func(g Gomega) map[string]bool {
				owners := map[string]bool{}
				for _, mf := range getShard(g, ctx, ns).ManagedFields {
					if mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), "f:podRoles") {
						owners[mf.Manager] = true
					}
				}
				return owners
			}
			want := HaveKey(multigres.FieldOwnerResourceHandler)
			if live {
				// The defective patch names no owner: the API server names one after the User-Agent.
				g.Eventually(podRolesOwners).WithTimeout(5 * time.Second).Should(And(want, HaveKey("mini-multigres")))
			} else {
				g.Consistently(podRolesOwners).WithTimeout(300 * time.Millisecond).Should(And(want, Not(HaveKey("mini-multigres"))))
			}
		})
	}
}

func TestNoRequeueUnconverged(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprint("live=", live), func(t *testing.T) {
			g := NewWithT(t)
			opts := multigres.DefaultOptions().WithDefect(multigres.DefectNoRequeueUnconverged, live)
			ctx, ns := startWith(t, opts, 1500*time.Millisecond)
			storageClass(ctx, t, "fast")
			g.Expect(direct.Create(ctx, cluster(ns, basicShard()))).To(Succeed())
			// Poolers register (in topology, no event) after the pods exist; only a requeue sees them.
			healthy := func() bool {
				s := &mgv1.Shard{}
				return direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: shardName}, s) == nil &&
					s.Status.Phase == mgv1.PhaseHealthy
			}
			if live {
				g.Consistently(healthy).WithTimeout(4*time.Second).Should(BeFalse(), "a shard that asks for no requeue saw the late poolers")
			} else {
				g.Eventually(healthy).WithTimeout(20*time.Second).Should(BeTrue(), "the requeueing shard never saw the late poolers")
			}
		})
	}
}

func TestMultiorchCountedAsPool(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprint("live=", live), func(t *testing.T) {
			g := NewWithT(t)
			opts := multigres.DefaultOptions().WithDefect(multigres.DefectMultiorchCountedAsPool, live)
			ctx, ns := healthyThen(t, opts, basicShard())
			poolsReady := func(g Gomega) bool { return getShard(g, ctx, ns).Status.PoolsReady }
			if live {
				g.Consistently(poolsReady).WithTimeout(1500*time.Millisecond).Should(BeFalse(), "the multiorch pod was not counted as a pool pod")
			} else {
				g.Eventually(poolsReady).WithTimeout(10 * time.Second).Should(BeTrue())
			}
		})
	}
}
