package scenarios

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Thrash: spec edits written back to back, without waiting for the operator, must converge to the last one.
// A pod the shard asked to drain for an earlier edit may be wanted again by a later one; whatever the
// controllers make of the intermediate specs, the end state is the last spec's.

var _ = Describe("multigres thrash", Label("multigres"), func() {
	It("a pool's replicas edited 2 -> 4 -> 1 -> 3 back to back converge to exactly 3 Ready pods and a matching status (over 3 s: a bring-up, then pods made, drained and made again as the edits land, and 500 ms of quiet)", thrashSpec)
})

// thrashSpec writes three replica counts to a Healthy shard's pool without waiting between them, then waits
// for quiescence and checks the namespace against the last count.
func thrashSpec() {
	c := s.NewCase(GinkgoT())
	spec := fixtures.MultigresSpec{}
	names := spec.Names()
	bringUpHealthy(c, spec)

	By("writing replicas 4, 1 and 3 back to back")
	edits := time.Now()
	for _, n := range []int32{4, 1, 3} {
		setPoolReplicas(c, names.Cluster, "main", n)
	}
	want := spec.PoolPods("main", 3)
	Eventually(func(g Gomega) {
		g.Expect(ownedPoolPods(g, c, names.Shard)).To(Equal(want))
		sh := &mgv1.Shard{}
		g.Expect(c.Get(names.Shard, sh)).To(Succeed())
		g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
	}).WithTimeout(healthyTimeout).Should(Succeed(), "the shard never converged to the last edit (3 replicas)")
	c.RequireQuiescent(500*time.Millisecond, 30*time.Second)

	expectConvergedTo(c, names, want)
	AddReportEntry("thrash", thrashSummary(c, edits))
}

// expectConvergedTo checks the quiet namespace against pods, the pool pods of the last edit: the shard's spec
// and observedGeneration caught up with it, exactly those pods exist, each Ready, not being deleted and with
// no drain annotation, and the status counts exactly them; the table group and cluster are Healthy.
func expectConvergedTo(c *suite.Case, names fixtures.MultigresNames, pods []string) {
	GinkgoHelper()
	sh := shardOf(c, names.Shard)
	Expect(sh.Spec.Pools["main"].ReplicasPerCell).To(BeEquivalentTo(len(pods)), "the shard's spec is not the last edit")
	Expect(sh.Status.ObservedGeneration).To(Equal(sh.Generation), "the shard's status is for an earlier spec")
	all := &corev1.PodList{}
	Expect(c.List(all)).To(Succeed())
	var got []string
	for _, p := range all.Items {
		if p.Labels[multigres.LabelComponent] != multigres.ComponentShardPool {
			continue
		}
		got = append(got, p.Name)
		Expect(p.DeletionTimestamp).To(BeNil(), "pod %s is being deleted", p.Name)
		Expect(p.Annotations).NotTo(HaveKey(multigres.AnnotationDrainState), "pod %s is still marked for draining", p.Name)
		Expect(podReady(c, p.Name)).To(BeTrue(), "pool pod %s is not Ready", p.Name)
	}
	Expect(got).To(ConsistOf(pods), "pool pods after the last edit")
	expectShardCounts(c, names.Shard, pods)
	tg := &mgv1.TableGroup{}
	Expect(c.Get(names.TableGroup, tg)).To(Succeed())
	Expect(tg.Status.Phase).To(Equal(mgv1.PhaseHealthy))
	mc := &mgv1.MultigresCluster{}
	Expect(c.Get(names.Cluster, mc)).To(Succeed())
	Expect(mc.Status.Phase).To(Equal(mgv1.PhaseHealthy))
	Expect(mc.Status.ObservedGeneration).To(Equal(mc.Generation))
}

// thrashSummary renders, from the event stream since the edits, the shard generations seen, the pods created
// and deleted (by name), and the operator's successful writes, for the report.
func thrashSummary(c *suite.Case, since time.Time) string {
	var gens, deleted []string
	added := 0
	for _, ch := range c.Changes(suite.ChangeFilter{Since: since}) {
		switch {
		case ch.Kind == "Shard":
			for _, f := range ch.Fields {
				if f.Path == "metadata.generation" {
					gens = append(gens, f.New)
				}
			}
		case ch.Kind == "Pod" && ch.Type == suite.Added:
			added++
		case ch.Kind == "Pod" && ch.Type == suite.Deleted:
			deleted = append(deleted, ch.Name)
		}
	}
	writes := len(c.Writes(suite.WriteFilter{Manager: "multigres", Since: since}))
	return fmt.Sprintf("shard generations seen: %s; pods added %d, deleted %d (%s); %d operator writes; converged and quiet %s after the edits",
		strings.Join(gens, ", "), added, len(deleted), strings.Join(deleted, ", "), writes, time.Since(since).Round(time.Millisecond))
}
