package scenarios

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// A TableGroup applied on its own: the TableGroup is a resource of its own (docs/architecture.md §6
// TableGroup), and one applied without a MultigresCluster, so without the cluster label its Shards and pods
// would copy, must bring its shard up as one the cluster made.

var _ = Describe("multigres standalone table group", Label("multigres"), func() {
	It("a table group applied without a cluster brings its shard up Healthy, its pods carrying no cluster label", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		names := spec.Names()
		cluster, err := fixtures.Multigres(spec)
		Expect(err).NotTo(HaveOccurred())
		tg := multigres.DesiredTableGroups(cluster)[0]
		tg.OwnerReferences = nil
		delete(tg.Labels, multigres.LabelCluster)
		allowElectionOrder(c, suite.Objects{Kind: "Shard", Name: names.Shard})
		Expect(c.Create(tg)).To(Succeed())

		Eventually(func(g Gomega) {
			sh := &mgv1.Shard{}
			g.Expect(c.Get(names.Shard, sh)).To(Succeed())
			g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
			g.Expect(sh.Status.PodRoles).To(HaveLen(2), "podRoles")
		}).WithTimeout(healthyTimeout).Should(Succeed(), "a table group without a cluster never brought its shard up")
		pods := &corev1.PodList{}
		Expect(c.List(pods)).To(Succeed())
		Expect(pods.Items).To(HaveLen(3), "two pool pods and a multiorch pod")
		for _, p := range pods.Items {
			Expect(p.Labels).NotTo(HaveKey(multigres.LabelCluster), "pod %s", p.Name)
		}
		Expect(failedPasses(c)).To(BeEmpty())
	})
})
