package scenarios

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Defaults: each reconciler documents that a nil Client (and, for the Shard, a nil APIReader) means the
// manager's own. An operator whose main sets up the three reconcilers with only their topology and options
// must work as one that passes the manager's clients (fixtures.MultigresManager does). Likewise Options: a zero
// duration means its default, so an operator started with zero Options must requeue as the defaults say.

// defaultsManager and zeroOptionsManager name the specs' own multigres managers.
const (
	defaultsManager    = "mg-defaults"
	zeroOptionsManager = "mg-zero"
)

// multigresDefaultsInstance starts a multigres manager of the case's own, named name, ungated and scoped to the
// case's namespace (which must be Unadmitted), whose reconcilers get no Client and no APIReader. It stops after
// the case's cleanup.
func multigresDefaultsInstance(c *suite.Case, name string) *suite.Manager {
	GinkgoHelper()
	m, err := s.StartManager(suite.ManagerOptions{Name: name, UserAgent: fixtures.MultigresUserAgent, Ungated: true,
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{c.Namespace: {}}},
		Register: func(_ context.Context, mgr manager.Manager) error {
			for _, r := range []interface{ SetupWithManager(manager.Manager) error }{
				&multigres.ClusterReconciler{Topo: topology, Options: mgOptions},
				&multigres.TableGroupReconciler{Options: mgOptions},
				&multigres.ShardReconciler{Topo: topology, Options: mgOptions},
			} {
				if err := r.SetupWithManager(mgr); err != nil {
					return err
				}
			}
			return nil
		}})
	Expect(err).NotTo(HaveOccurred())
	c.AfterCleanup(func() { _ = m.Stop() })
	return m
}

var _ = Describe("multigres defaults", Label("multigres"), func() {
	It("reconcilers set up without clients use the manager's: a cluster comes up Healthy and a deleted pool pod is replaced, no pass failing", func() {
		c := s.NewCase(GinkgoT(), suite.Unadmitted())
		multigresDefaultsInstance(c, defaultsManager)
		spec := fixtures.MultigresSpec{}
		names := spec.Names()
		bringUpHealthy(c, spec)

		By("deleting a pool pod: the shard recreates it and confirms past its cache that the pod is back")
		pod := spec.PoolPods("main", 2)[1]
		old := &corev1.Pod{}
		Expect(c.Get(pod, old)).To(Succeed())
		Expect(c.Delete(old)).To(Succeed())
		Eventually(func(g Gomega) {
			p := &corev1.Pod{}
			g.Expect(c.Get(pod, p)).To(Succeed())
			g.Expect(p.UID).NotTo(Equal(old.UID))
			sh := &mgv1.Shard{}
			g.Expect(c.Get(names.Shard, sh)).To(Succeed())
			g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
		}).WithTimeout(healthyTimeout).Should(Succeed(), "the deleted pool pod was not replaced")
		var failed []string
		for _, p := range c.Passes(suite.PassFilter{Manager: defaultsManager}) {
			if p.Err != nil && !apierrors.IsConflict(p.Err) {
				failed = append(failed, p.Controller+" "+p.Request.Name+": "+p.Err.Error())
			}
		}
		Expect(failed).To(BeEmpty(), "passes failed (a conflict is the API's request to read again, not a failure)")
	})

	It("an operator started with zero Options, every duration its documented default, registers a cell added while topology was down", func() {
		c := s.NewCase(GinkgoT(), suite.Unadmitted())
		multigresInstance(c, zeroOptionsManager, multigres.Options{})
		spec := fixtures.MultigresSpec{}
		names := spec.Names()
		bringUpHealthy(c, spec)

		takeTopologyDown(c)
		mc := &mgv1.MultigresCluster{}
		Expect(c.Update(names.Cluster, mc, func() { mc.Spec.Cells = append(mc.Spec.Cells, "z2") })).To(Succeed())
		By("waiting until the cluster has met the outage on its new generation, twice")
		seen := time.Now()
		Eventually(func(g Gomega) {
			g.Expect(c.Get(names.Cluster, mc)).To(Succeed())
			g.Expect(mc.Status.ObservedGeneration).To(Equal(mc.Generation))
			n := 0
			for _, p := range c.Passes(suite.PassFilter{Name: names.Cluster, Controller: multigres.ClusterControllerName, Since: seen}) {
				if !p.End.IsZero() {
					n++
				}
			}
			g.Expect(n).To(BeNumerically(">=", 2), "cluster passes since the edit")
		}).WithTimeout(10*time.Second).Should(Succeed(), "the cluster stopped trying while topology was down")
		Expect(topology.Cells(c.Namespace)).NotTo(ContainElement("z2"), "z2 was registered while topology was down")

		topology.Unavailable(c.Namespace, false)
		Eventually(func() []string { return topology.Cells(c.Namespace) }).WithTimeout(10*time.Second).
			Should(ConsistOf("z1", "z2"), "the cell added during the outage was never registered: no requeue brought the cluster back")
	})
})
