package scenarios

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ensembletest/ensemble/fakes/pooler"
	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
	"github.com/ensembletest/ensemble/pins"
	"github.com/ensembletest/ensemble/suite"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// Pruning on a stale view: the Shard controller shuts down the pooler of every pod missing from its pod
// list, and that list comes from its manager's cache while topology is read fresh. A stale point on the
// new pod's create holds the pod from that cache while the pooler registers, the interleaving that load
// produced by chance. The suite's shared multigres manager runs the defect fixed (its catalog default), so
// no other spec meets it; the pin runs a multigres instance of its own, scoped to its case's namespace, in
// the state pins.Default.PinState gives it: live, and fixed under ENSEMBLE_DEFECTS=MG-PRUNE-ON-STALE-PODS=live
// (the defect matrix's flip, which then turns the shared manager live).

var _ = Describe("multigres", Label("multigres"), func() {
	It("pins MG-PRUNE-ON-STALE-PODS: a pool scaled 2 -> 3 with the new pod held from the shard controller's cache while its pooler registers", Label("pin"), stalePrunePinSpec)
})

// stalePruneManager is the name of the pin's own multigres manager.
const stalePruneManager = "mg-prune"

// multigresInstance starts a multigres manager of the case's own, named name, ungated and scoped to the
// case's namespace (which must be Unadmitted, so the suite's gated multigres manager leaves it alone), with
// opts, against the suite's topology. It stops after the case's cleanup; a start that fails fails the spec.
func multigresInstance(c *suite.Case, name string, opts multigres.Options) *suite.Manager {
	GinkgoHelper()
	mo := fixtures.MultigresManager(name, opts, topology)
	mo.Ungated = true
	mo.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{c.Namespace: {}}}
	m, err := s.StartManager(mo)
	Expect(err).NotTo(HaveOccurred())
	c.AfterCleanup(func() { _ = m.Stop() })
	return m
}

// staleHoldWrites is the stale point's count of further writes in the namespace: far more than the case
// makes before it calls Release (the shard retries the held pod's create about once per requeue), so the
// hold ends at Release and never on a clock.
const staleHoldWrites = 1000

// stalePrunePinSpec scales a Healthy shard's pool from 2 to 3 pods with the third pod held from the
// multigres manager's cache from its create on, waits for a shard pass that read the registered pooler
// from topology while its cached pod list still lacked the pod, and reads the pooler's lifecycle. With the
// defect the pass set it SHUTDOWN; without it the pooler stays SERVING and, once the hold is released, the
// pod gets its role and the shard is Healthy.
func stalePrunePinSpec() {
	c := s.NewCase(GinkgoT(), suite.Unadmitted())
	st, err := pins.Default.PinState(multigres.DefectPruneOnStalePods)
	Expect(err).NotTo(HaveOccurred())
	mgr := multigresInstance(c, stalePruneManager, mgOptions.WithDefect(multigres.DefectPruneOnStalePods, st == pins.Live))
	spec := fixtures.MultigresSpec{}
	bringUpHealthy(c, spec)
	names := spec.Names()
	newPod := spec.PoolPods("main", 3)[2]
	poolerName := pooler.PoolerNamePrefix + newPod

	c.Perturb(perturb.Point{Mode: perturb.Stale, Writer: mgr.Name + "/" + multigres.ShardControllerName,
		Object: "Pod/" + newPod, Trigger: perturb.Nth(1), For: staleHoldWrites})
	setPoolReplicas(c, names.Cluster, "main", 3)

	By("waiting for the held pod's pooler to register")
	var registered time.Time
	Eventually(func() bool {
		registered = registeredAt(c, poolerName)
		return !registered.IsZero()
	}).WithTimeout(healthyTimeout).Should(BeTrue(), "pooler %s never registered", poolerName)

	By("waiting for a shard pass that read the pooler while its cache lacked the pod")
	Eventually(func() bool {
		return stalePass(c, names.Shard, newPod, registered)
	}).WithTimeout(healthyTimeout).Should(BeTrue(),
		"no shard pass started after %s registered, recreated %s (so listed the pods without it) and ended without an error: the race was not constructed",
		poolerName, newPod)
	lifecycle := lifecycleOf(c, poolerName)
	c.Release()

	if lifecycle == topo.LifecycleShutdown {
		By("the pooler pruned: once the hold is released the pod reports its pooler shut down")
		Eventually(func(g Gomega) {
			cond, _ := podCondition(c, newPod, multigres.PodConditionPoolerDataReady)
			g.Expect(cond.Reason).To(Equal(multigres.ReasonPoolerShutdown))
		}).WithTimeout(healthyTimeout).Should(Succeed(), "the shard never reported %s's pooler shut down", newPod)
		Expect(shardOf(c, names.Shard).Status.PodRoles).NotTo(HaveKey(newPod), "a pod whose pooler is SHUTDOWN has a role")
	} else {
		By("the pooler kept: once the hold is released the pod gets its role and the shard is Healthy")
		Eventually(func(g Gomega) {
			sh := &mgv1.Shard{}
			g.Expect(c.Get(names.Shard, sh)).To(Succeed())
			g.Expect(sh.Status.PodRoles).To(HaveKeyWithValue(newPod, "REPLICA"))
			g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard %s: %s", names.Shard, sh.Status.Message)
		}).WithTimeout(healthyTimeout).Should(Succeed(), "the held pod's role never landed in podRoles")
		Expect(podReady(c, newPod)).To(BeTrue(), "pool pod %s is not Ready", newPod)
	}

	c.KnownDefect(multigres.DefectPruneOnStalePods, func() error {
		if lifecycle != topo.LifecycleShutdown {
			return nil
		}
		return fmt.Errorf("pooler %s set SHUTDOWN %s while its pod ran but was missing from the shard's cache; the pod got no role",
			poolerName, prunedBy(c, names.Shard, poolerName))
	})
}

// prunedBy names the Shard pass over shard during which the named pooler was set SHUTDOWN ("by the shard's
// pass #n"), or says when it was when no pass of shard spans that moment.
func prunedBy(c *suite.Case, shard, name string) string {
	for _, e := range topology.Log(c.Namespace) {
		if e.Op != "set-lifecycle" || e.Pooler != name || !e.Changed {
			continue
		}
		for _, p := range c.Passes(suite.PassFilter{Name: shard, Controller: multigres.ShardControllerName}) {
			if !e.Time.Before(p.Start) && !p.End.IsZero() && !e.Time.After(p.End) {
				return fmt.Sprintf("by the shard's pass #%d", p.N)
			}
		}
		return "at " + e.Time.Format("15:04:05.000")
	}
	return "(no set-lifecycle call in topology's log)"
}

// registeredAt returns when the named pooler last registered in the case's topology; zero when it has not.
func registeredAt(c *suite.Case, name string) time.Time {
	var at time.Time
	for _, e := range topology.Log(c.Namespace) {
		if e.Op == "register" && e.Pooler == name && e.Changed {
			at = e.Time
		}
	}
	return at
}

// stalePass reports whether a Shard pass over shard started at or after since, ended without an error
// and created pod (which the shard does only for a pod missing from its cached list; the API server refuses
// that create with AlreadyExists, so refused writes are included). Such a pass read topology after since and
// ran its prune step over a pod list without pod.
func stalePass(c *suite.Case, shard, pod string, since time.Time) bool {
	created := map[int64]bool{}
	for _, w := range c.Writes(suite.WriteFilter{Kind: "Pod", Name: pod, Controller: multigres.ShardControllerName,
		Verb: suite.VerbCreate, Since: since, IncludeRejected: true}) {
		created[w.Pass] = true
	}
	for _, p := range c.Passes(suite.PassFilter{Name: shard, Controller: multigres.ShardControllerName, Since: since}) {
		if created[p.ID] && !p.End.IsZero() && p.Err == nil {
			return true
		}
	}
	return false
}

// lifecycleOf returns the lifecycle of the named pooler in the case's topology ("" when it is not there).
func lifecycleOf(c *suite.Case, name string) string {
	for _, pl := range topology.Snapshot(c.Namespace) {
		if pl.Name == name {
			return pl.Lifecycle
		}
	}
	return ""
}
