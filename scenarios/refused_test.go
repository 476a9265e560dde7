package scenarios

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// Refused writes: the API server may answer any write with an error (500, a timeout, throttling). An operator
// must then end the pass with that error, so that the user's reconcile-error metric and log show it and
// controller-runtime retries at once; a pass that carries on as if the write had been made hides the fault and
// waits for some later event or requeue to repair it. Each spec refuses chosen writes of the multigres manager
// once (Internal points), no two in one pass, and requires that every refused write failed its pass and the
// cluster still converged.

// refuse makes the API server answer with 500 the n-th write of the multigres controller to object
// ("Kind/name") counted from now.
func refuse(c *suite.Case, controller, object string, n int) {
	GinkgoHelper()
	c.Perturb(perturb.Point{Mode: perturb.Internal, Writer: "multigres/" + controller, Object: object, Trigger: perturb.Nth(n)})
}

// refusedWrites returns how many writes of the multigres manager a point refused, and a line for each one
// whose reconcile pass nevertheless ended without an error.
func refusedWrites(c *suite.Case) (int, []string) {
	passes := map[int64]suite.Pass{}
	for _, p := range c.Passes(suite.PassFilter{Manager: "multigres"}) {
		passes[p.ID] = p
	}
	n := 0
	var swallowed []string
	for _, w := range c.Writes(suite.WriteFilter{Manager: "multigres", IncludeRejected: true}) {
		if w.Point == "" || w.Err == nil {
			continue
		}
		n++
		if p, ok := passes[w.Pass]; !ok || p.Err == nil {
			swallowed = append(swallowed, fmt.Sprintf("%s (pass %d ended without an error)", w, w.Pass))
		}
	}
	return n, swallowed
}

// expectRefusalsReported fails unless want writes were refused and each failed its pass.
func expectRefusalsReported(c *suite.Case, want int) {
	GinkgoHelper()
	n, swallowed := refusedWrites(c)
	Expect(n).To(Equal(want), "refused writes: the points did not all fire")
	Expect(swallowed).To(BeEmpty(), "a write the API server refused was carried on from as if it had been made")
}

var _ = Describe("multigres refused writes", Label("multigres"), func() {
	It("a refused pod create or drain step fails its shard pass, and the shard still comes up, scales and drains", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		names := spec.Names()
		pods := spec.PoolPods("main", 3)
		By("bringing the shard up with its multiorch pod's create refused")
		refuse(c, multigres.ShardControllerName, "Pod/"+multigres.MultiorchPodName(names.Shard, "z1"), 1)
		bringUpHealthy(c, spec)

		expectPoolPods := func(want []string) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				g.Expect(ownedPoolPods(g, c, names.Shard)).To(Equal(want))
				sh := &mgv1.Shard{}
				g.Expect(c.Get(names.Shard, sh)).To(Succeed())
				g.Expect(sh.Status.ObservedGeneration).To(Equal(sh.Generation))
				g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
			}).WithTimeout(healthyTimeout).Should(Succeed(), "the pool never settled on %v", want)
		}
		By("scaling the pool 2 -> 3 with the new pod's create refused")
		refuse(c, multigres.ShardControllerName, "Pod/"+pods[2], 1)
		setPoolReplicas(c, names.Cluster, "main", 3)
		expectPoolPods(pods)

		By("scaling the pool 3 -> 2 with the first drain mark and a drain step refused")
		refuse(c, multigres.ShardControllerName, "Pod/"+pods[2], 1)
		refuse(c, multigres.ShardControllerName, "Pod/"+pods[2], 3)
		setPoolReplicas(c, names.Cluster, "main", 2)
		expectPoolPods(pods[:2])
		expectRefusalsReported(c, 4)
	})

	It("a refused write of a table group's retirement fails its pass, and the table group and its shard still go (about 4 s: the retirement drains the shard's pods a step a pass, and two settles wait 500 ms of quiet)", func() {
		c := s.NewCase(GinkgoT())
		cluster, names, second := twoTableGroups()
		db := &cluster.Spec.Databases[0]
		tg2 := multigres.TableGroupName(cluster.Name, db.Name, second.Name)
		shard2 := multigres.ShardName(tg2, second.Shards[0].Name)
		allowElectionOrder(c, suite.Objects{Kind: "Shard"})
		Expect(c.Create(cluster)).To(Succeed())
		settleShards(c, names.Cluster, []string{names.Shard, shard2})

		By("removing tg2 with a write of each step of its handshake refused")
		// The status writes refused are each writer's second, so that no refusal shares a pass with another's.
		refuse(c, multigres.ClusterControllerName, "TableGroup/"+tg2, 1)                                   // its pending-deletion mark
		refuse(c, multigres.TableGroupControllerName, "Shard/"+shard2, 1)                                  // its shard's mark
		refuse(c, multigres.TableGroupControllerName, "TableGroup/"+tg2, 2)                                // its status (ReadyForDeletion)
		refuse(c, multigres.ShardControllerName, "Shard/"+shard2, 2)                                       // the shard's status while draining
		refuse(c, multigres.ShardControllerName, "Pod/"+multigres.PoolPodName(shard2, "main", "z1", 0), 1) // a drain step
		setTableGroups(c, names.Cluster, db.TableGroups[:1])
		settleShards(c, names.Cluster, []string{names.Shard})
		Expect(c.Get(tg2, &mgv1.TableGroup{})).NotTo(Succeed(), "table group %s is still there", tg2)
		expectRefusalsReported(c, 5)
	})
})
