package scenarios

import (
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Multiorch placement: a shard runs one multiorch pod per cell its spec names, or per cell of its pools when it
// names none (docs/architecture.md §6 Shard, step 3), and follows edits of that list both ways.

// multiorchPods returns the names of the case's pods labelled component=multiorch that are not being deleted,
// sorted.
func multiorchPods(g Gomega, c *suite.Case) []string {
	pods := &corev1.PodList{}
	g.Expect(c.List(pods, client.MatchingLabels{multigres.LabelComponent: multigres.ComponentMultiorch})).To(Succeed())
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// setMultiorchCells writes cells as the multiorch cells of the first shard of the case's cluster.
func setMultiorchCells(c *suite.Case, cluster string, cells []string) {
	GinkgoHelper()
	mc := &mgv1.MultigresCluster{}
	Expect(c.Update(cluster, mc, func() {
		mc.Spec.Databases[0].TableGroups[0].Shards[0].Multiorch.Cells = cells
	})).To(Succeed())
}

var _ = Describe("multigres multiorch placement", Label("multigres"), func() {
	It("multiorch runs in its pools' cells by default, and a cell added to or removed from its spec gains or loses its multiorch pod", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		names := spec.Names()
		cluster, err := fixtures.Multigres(spec)
		Expect(err).NotTo(HaveOccurred())
		cluster.Spec.Cells = []string{"z1", "z2"}
		cluster.Spec.Databases[0].TableGroups[0].Shards[0].Multiorch.Cells = nil
		allowElectionOrder(c, suite.Objects{Kind: "Shard", Name: names.Shard})
		Expect(c.Create(cluster)).To(Succeed())

		expect := func(what string, cells ...string) {
			GinkgoHelper()
			var want []string
			for _, cell := range cells {
				want = append(want, multigres.MultiorchPodName(names.Shard, cell))
			}
			Eventually(func(g Gomega) {
				sh := &mgv1.Shard{}
				g.Expect(c.Get(names.Shard, sh)).To(Succeed())
				g.Expect(sh.Status.ObservedGeneration).To(Equal(sh.Generation))
				g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
				g.Expect(multiorchPods(g, c)).To(Equal(want))
			}).WithTimeout(healthyTimeout).Should(Succeed(), "%s: multiorch should run in %v", what, cells)
		}
		expect("no multiorch cells named: the pools' cell", "z1")
		pools := ownedPoolPods(Default, c, names.Shard)

		setMultiorchCells(c, names.Cluster, []string{"z1", "z2"})
		expect("z2 added", "z1", "z2")
		setMultiorchCells(c, names.Cluster, []string{"z1"})
		expect("z2 removed", "z1")
		Expect(ownedPoolPods(Default, c, names.Shard)).To(Equal(pools), "moving multiorch changed the pool pods")
		Expect(failedPasses(c)).To(BeEmpty())
	})
})
