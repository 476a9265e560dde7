package scenarios

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
	"github.com/ensembletest/ensemble/suite"
)

// Topology outages: Multigres topology is an external system the operator cannot watch, so while it is down the
// operator must come back to it by itself (docs/architecture.md §6: the cluster "requeues while topology is
// unavailable"), an outage is a wait rather than a failing reconcile, and deleting a cluster must not depend on
// it.

// takeTopologyDown makes the case's topology unavailable until the spec ends or it is brought back.
func takeTopologyDown(c *suite.Case) {
	topology.Unavailable(c.Namespace, true)
	DeferCleanup(topology.Unavailable, c.Namespace, false)
}

// namespaceEmptyOf reports the case's MultigresClusters, TableGroups, Shards and pods still present.
func namespaceEmptyOf(g Gomega, c *suite.Case) {
	mcs, tgs, shards, pods := &mgv1.MultigresClusterList{}, &mgv1.TableGroupList{}, &mgv1.ShardList{}, &corev1.PodList{}
	g.Expect(c.List(mcs)).To(Succeed())
	g.Expect(c.List(tgs)).To(Succeed())
	g.Expect(c.List(shards)).To(Succeed())
	g.Expect(c.List(pods)).To(Succeed())
	g.Expect(mcs.Items).To(BeEmpty(), "MultigresClusters left")
	g.Expect(tgs.Items).To(BeEmpty(), "TableGroups left")
	g.Expect(shards.Items).To(BeEmpty(), "Shards left")
	g.Expect(pods.Items).To(BeEmpty(), "pods left")
}

var _ = Describe("multigres topology outage", Label("multigres"), func() {
	It("a cell added to a Healthy cluster while topology is down is registered once topology is back, and the outage fails no pass", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		bringUpHealthy(c, spec)
		names := spec.Names()
		Expect(topology.Cells(c.Namespace)).To(ConsistOf("z1"))
		Expect(topology.Databases(c.Namespace)).To(ConsistOf("db"))

		takeTopologyDown(c)
		mc := &mgv1.MultigresCluster{}
		Expect(c.Update(names.Cluster, mc, func() { mc.Spec.Cells = append(mc.Spec.Cells, "z2") })).To(Succeed())
		By("waiting until the cluster has seen its new generation while topology is down")
		Eventually(func(g Gomega) {
			g.Expect(c.Get(names.Cluster, mc)).To(Succeed())
			g.Expect(mc.Status.ObservedGeneration).To(Equal(mc.Generation))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Expect(topology.Cells(c.Namespace)).NotTo(ContainElement("z2"), "z2 was registered while topology was down: the outage was not constructed")
		By("waiting until every pass the cluster's own writes caused has run into the outage")
		seen := time.Now()
		Eventually(func() int {
			n := 0
			for _, p := range c.Passes(suite.PassFilter{Name: names.Cluster, Controller: multigres.ClusterControllerName, Since: seen}) {
				if !p.End.IsZero() {
					n++
				}
			}
			return n
		}).WithTimeout(10*time.Second).Should(BeNumerically(">=", 2), "the cluster stopped trying while topology was down")
		Expect(topology.Cells(c.Namespace)).NotTo(ContainElement("z2"))

		By("bringing topology back: nothing in Kubernetes changes, the operator must come back on its own")
		topology.Unavailable(c.Namespace, false)
		Eventually(func() []string { return topology.Cells(c.Namespace) }).WithTimeout(10*time.Second).
			Should(ConsistOf("z1", "z2"), "the cell added during the outage was never registered")
		Expect(failedPasses(c)).To(BeEmpty(), "an unavailable topology is a wait, not a failing reconcile")
	})

	It("a cluster deleted while topology is down is removed with its table group, shard and pods, and no pass fails", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		bringUpHealthy(c, spec)
		names := spec.Names()

		takeTopologyDown(c)
		mc := &mgv1.MultigresCluster{}
		Expect(c.Get(names.Cluster, mc)).To(Succeed())
		Expect(c.Delete(mc)).To(Succeed())
		Eventually(func(g Gomega) { namespaceEmptyOf(g, c) }).WithTimeout(healthyTimeout).Should(Succeed(),
			"deleting a cluster must not wait on topology")
		Expect(failedPasses(c)).To(BeEmpty(), "deleting a cluster makes no pass fail")
	})

	It("a pool scaled down while topology is down, its pod deleted by hand meanwhile: once topology is back the gone pod's pooler is shut down and no pass fails", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		bringUpHealthy(c, spec)
		names := spec.Names()
		gone := spec.PoolPods("main", 2)[1]

		takeTopologyDown(c)
		setPoolReplicas(c, names.Cluster, "main", 1)
		By("waiting until the shard asked the pod to drain: the drain cannot go on while topology is down")
		Eventually(func(g Gomega) {
			p := &corev1.Pod{}
			g.Expect(c.Get(gone, p)).To(Succeed())
			g.Expect(p.Annotations).To(HaveKeyWithValue(multigres.AnnotationDrainState, multigres.DrainRequested))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		p := &corev1.Pod{}
		Expect(c.Get(gone, p)).To(Succeed())
		Expect(c.Delete(p)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(c.Get(gone, &corev1.Pod{})) }).WithTimeout(10*time.Second).
			Should(BeTrue(), "pod %s was never deleted", gone)

		By("bringing topology back: the pooler of the pod that went without its drain must not go on serving")
		topology.Unavailable(c.Namespace, false)
		Eventually(func(g Gomega) {
			var lifecycle string
			for _, pl := range topology.Snapshot(c.Namespace) {
				if pl.Hostname == gone {
					lifecycle = pl.Lifecycle
				}
			}
			g.Expect(lifecycle).To(Equal(topo.LifecycleShutdown), "pooler of %s", gone)
			sh := &mgv1.Shard{}
			g.Expect(c.Get(names.Shard, sh)).To(Succeed())
			g.Expect(sh.Status.ObservedGeneration).To(Equal(sh.Generation))
			g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
		}).WithTimeout(10*time.Second).Should(Succeed(), "topology still offers the gone pod's pooler")
		Expect(failedPasses(c)).To(BeEmpty(), "shutting down a gone pod's pooler made a pass fail")
	})
})
