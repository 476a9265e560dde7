package scenarios

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Requeues of a retirement: a shard draining a pod polls again after DrainRequeue, sooner than its
// unconverged backoff, and a table group retiring a shard polls again after PendingDeletionRequeue
// (docs/architecture.md §6), so neither waits on a watch event alone. Requeue compression shortens the waits
// in the suite; Pass.Asked keeps what each pass asked for.

// askedWithin counts the passes of controller over name since since that ended without an error and asked to
// be polled again after more than 0 and at most d.
func askedWithin(c *suite.Case, name, controller string, since time.Time, d time.Duration) int {
	n := 0
	for _, p := range c.Passes(suite.PassFilter{Name: name, Controller: controller, Since: since}) {
		if p.Err == nil && !p.End.IsZero() && p.Asked > 0 && p.Asked <= d {
			n++
		}
	}
	return n
}

var _ = Describe("multigres retirement requeues", Label("multigres"), func() {
	It("a shard draining a pod, or retiring with its pods, asks to be polled after the drain requeue, and a table group retiring a shard after the pending-deletion requeue (about 3.5 s: two shards come up, then one drains a pod while the other retires)", func() {
		c := s.NewCase(GinkgoT())
		cluster, names, second := twoShards()
		retired := multigres.ShardName(names.TableGroup, second.Name)
		allowElectionOrder(c, suite.Objects{Kind: "Shard"})
		Expect(c.Create(cluster)).To(Succeed())
		settleShards(c, names.Cluster, []string{names.Shard, retired})

		By("scaling shard 0's pool 2 -> 1 and removing shard 1 in one edit")
		since := time.Now()
		mc := &mgv1.MultigresCluster{}
		Expect(c.Update(names.Cluster, mc, func() {
			shards := &mc.Spec.Databases[0].TableGroups[0].Shards
			*shards = (*shards)[:1]
			p := (*shards)[0].Pools["main"]
			p.ReplicasPerCell = 1
			(*shards)[0].Pools["main"] = p
		})).To(Succeed())
		settleShards(c, names.Cluster, []string{names.Shard})

		Expect(askedWithin(c, names.Shard, multigres.ShardControllerName, since, mgOptions.DrainRequeue)).To(BeNumerically(">", 0),
			"no pass of shard %s asked to be polled within the drain requeue %v while its pod drained", names.Shard, mgOptions.DrainRequeue)
		Expect(askedWithin(c, names.TableGroup, multigres.TableGroupControllerName, since, mgOptions.PendingDeletionRequeue)).To(BeNumerically(">", 0),
			"no pass of table group %s asked to be polled within the pending-deletion requeue %v while shard %s retired",
			names.TableGroup, mgOptions.PendingDeletionRequeue, retired)
		By("the retired shard asked for the drain requeue while its pods drained")
		var firstGone time.Time
		pods := []string{multigres.MultiorchPodName(retired, "z1")}
		for i := range 2 {
			pods = append(pods, multigres.PoolPodName(retired, "main", "z1", i))
		}
		for _, pod := range pods {
			for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod", Name: pod, Type: suite.Deleted, Since: since}) {
				if firstGone.IsZero() || ch.Time.Before(firstGone) {
					firstGone = ch.Time
				}
			}
		}
		Expect(firstGone.IsZero()).To(BeFalse(), "no pod of shard %s was seen deleted", retired)
		draining := 0
		for _, p := range c.Passes(suite.PassFilter{Name: retired, Controller: multigres.ShardControllerName, Since: since}) {
			if p.Start.Before(firstGone) && p.Err == nil && !p.End.IsZero() && p.Asked > 0 && p.Asked <= mgOptions.DrainRequeue {
				draining++
			}
		}
		Expect(draining).To(BeNumerically(">", 0), "no pass of shard %s asked to be polled within the drain requeue %v before its first pod was gone",
			retired, mgOptions.DrainRequeue)
		Expect(failedPasses(c)).To(BeEmpty())
	})

	It("a shard pending deletion with no pod reports ReadyForDeletion while topology is down, then waits for its parent to delete it without asking to be polled", func() {
		c := s.NewCase(GinkgoT())
		topology.Unavailable(c.Namespace, true)
		DeferCleanup(topology.Unavailable, c.Namespace, false)
		// A Shard as its table group applies it, marked pending deletion as the table group marks one it no
		// longer wants, and no table group to delete it: the parent that marked it has not acted yet.
		cluster, err := fixtures.Multigres(fixtures.MultigresSpec{})
		Expect(err).NotTo(HaveOccurred())
		sh := multigres.DesiredShards(multigres.DesiredTableGroups(cluster)[0])[0]
		sh.OwnerReferences = nil
		sh.Annotations = map[string]string{multigres.AnnotationPendingDeletion: "true"}
		Expect(c.Create(sh)).To(Succeed())

		By("with no pod to drain the shard needs no topology: it reports ReadyForDeletion during the outage")
		Eventually(func(g Gomega) {
			got := &mgv1.Shard{}
			g.Expect(c.Get(sh.Name, got)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, mgv1.ConditionReadyForDeletion)).To(BeTrue(),
				"conditions: %+v", got.Status.Conditions)
		}).WithTimeout(healthyTimeout).Should(Succeed(), "shard %s, pending deletion with no pod, never reported ReadyForDeletion while topology was down", sh.Name)

		By("nothing is left to drain: no pass asks to be polled, the parent's deletion is what comes next")
		// The pass that wrote ReadyForDeletion also added the finalizer; each write wakes one more pass.
		Eventually(func() int {
			n := 0
			for _, p := range c.Passes(suite.PassFilter{Name: sh.Name, Controller: multigres.ShardControllerName}) {
				if !p.End.IsZero() {
					n++
				}
			}
			return n
		}).WithTimeout(healthyTimeout).Should(BeNumerically(">=", 2), "the writes of shard %s's first pass woke no other pass", sh.Name)
		var polls []string
		for _, p := range c.Passes(suite.PassFilter{Name: sh.Name, Controller: multigres.ShardControllerName}) {
			if !p.End.IsZero() && p.Asked > 0 {
				polls = append(polls, fmt.Sprintf("pass #%d asked %v", p.N, p.Asked))
			}
		}
		Expect(polls).To(BeEmpty(), "shard %s, pending deletion with no pod left, asked to be polled while it waits for its parent", sh.Name)
		Expect(failedPasses(c)).To(BeEmpty())
	})
})
