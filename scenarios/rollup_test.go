package scenarios

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Status roll-up: a user watches the MultigresCluster, not its Shards. Its status (and its TableGroups')
// must say how many children are ready and call the cluster Healthy only when every one is, at the
// generation the user last wrote (docs/architecture.md §6 MultigresCluster, TableGroup).

// fieldHistory returns the values the field at path of the case's kind/name took, in resourceVersion order,
// from the change stream (a value the object was created with is not among them).
func fieldHistory(c *suite.Case, kind, name, path string) []string {
	var out []string
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: kind, Name: name}) {
		for _, f := range ch.Fields {
			if f.Path == path {
				out = append(out, f.New)
			}
		}
	}
	return out
}

// failedPasses returns a line for each pass of the multigres manager's controllers in the case's namespace that
// ended in an error other than a conflict (an optimistic-lock conflict is the API's ordinary request to read
// again, and controller-runtime retries it).
func failedPasses(c *suite.Case) []string {
	var out []string
	for _, p := range c.Passes(suite.PassFilter{Manager: "multigres"}) {
		if p.Err != nil && !apierrors.IsConflict(p.Err) {
			out = append(out, p.Controller+" "+p.Request.Name+": "+p.Err.Error())
		}
	}
	return out
}

var _ = Describe("multigres status roll-up", Label("multigres"), func() {
	It("the cluster and its table group report Progressing, then Healthy with their ready table group and shard counted; the shard's conditions agree and the cluster's label selects its pods", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		bringUpHealthy(c, spec)
		names := spec.Names()

		Eventually(func(g Gomega) {
			mc := &mgv1.MultigresCluster{}
			g.Expect(c.Get(names.Cluster, mc)).To(Succeed())
			g.Expect(mc.Status).To(Equal(mgv1.MultigresClusterStatus{ObservedGeneration: mc.Generation,
				Phase: mgv1.PhaseHealthy, ReadyTableGroups: 1, TotalTableGroups: 1}), "cluster status")
			tg := &mgv1.TableGroup{}
			g.Expect(c.Get(names.TableGroup, tg)).To(Succeed())
			g.Expect(tg.Status.ObservedGeneration).To(Equal(tg.Generation), "table group status.observedGeneration")
			g.Expect(tg.Status.Phase).To(Equal(mgv1.PhaseHealthy), "table group status.phase")
			g.Expect([]int32{tg.Status.ReadyShards, tg.Status.TotalShards}).To(Equal([]int32{1, 1}),
				"table group status readyShards, totalShards")
		}).WithTimeout(10*time.Second).Should(Succeed(), "a Healthy shard's table group and cluster must report it")

		By("the Healthy shard's conditions say so, and every object of the cluster carries its label")
		sh := shardOf(c, names.Shard)
		for _, t := range []string{mgv1.ConditionAvailable, mgv1.ConditionPostureConsistent} {
			cond := meta.FindStatusCondition(sh.Status.Conditions, t)
			Expect(cond).NotTo(BeNil(), "a Healthy shard has no %s condition", t)
			Expect(cond.Status).To(Equal(metav1.ConditionTrue), "a Healthy shard reports %s %s: %s", t, cond.Status, cond.Message)
		}
		Expect(sh.Labels).To(HaveKeyWithValue(multigres.LabelCluster, names.Cluster), "shard labels")
		pods := &corev1.PodList{}
		Expect(c.List(pods)).To(Succeed())
		Expect(pods.Items).To(HaveLen(3), "two pool pods and a multiorch pod")
		for _, p := range pods.Items {
			Expect(p.Labels).To(HaveKeyWithValue(multigres.LabelCluster, names.Cluster), "pod %s labels", p.Name)
		}
		Expect(c.List(pods, client.MatchingLabels{multigres.LabelCluster: names.Cluster})).To(Succeed())
		Expect(pods.Items).To(HaveLen(3), "selecting the cluster's pods by its label")

		By("reading what each parent reported before its child was Healthy")
		for _, o := range []struct{ kind, name string }{
			{"MultigresCluster", names.Cluster},
			{"TableGroup", names.TableGroup},
		} {
			phases := fieldHistory(c, o.kind, o.name, "status.phase")
			Expect(phases).NotTo(BeEmpty(), "%s %s never wrote status.phase", o.kind, o.name)
			Expect(phases[0]).To(Equal(string(mgv1.PhaseProgressing)),
				"%s %s reported %v: it must be Progressing while its child is not Healthy", o.kind, o.name, phases)
			Expect(phases[len(phases)-1]).To(Equal(string(mgv1.PhaseHealthy)))
		}
		Expect(failedPasses(c)).To(BeEmpty(), "a cluster coming up makes no %s pass fail", multigres.ClusterControllerName)
	})
})
