package scenarios

import (
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/matrixone"
	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Pod-set scaling as closed-world scripts: a LogSet, DNSet or ProxySet whose replicas change creates or
// deletes exactly the ordinal pods the change names and touches no other pod, ConfigMap or set (the config
// does not depend on replicas, so no digest changes and nothing restarts). What the kubelet fake does to
// a new or deleted pod, and the set's status while it does, are progressions it paces: they are permitted
// as Modified at their paths, never counted.

// podSetScaleSpec is the cluster of the scaling specs: the given pod-set sizes and an empty pool (no CN
// pods, whose store registrations and resyncs would be other changes in the namespace).
func podSetScaleSpec(logSet, dnSet, proxySet int32) fixtures.MatrixOneSpec {
	return fixtures.MatrixOneSpec{LogSetReplicas: ptr.To(logSet), DNSetReplicas: ptr.To(dnSet), ProxySetReplicas: ptr.To(proxySet),
		PoolMaxIdle: ptr.To[int32](0)}
}

// bringUpQuiet creates spec's cluster in the case (newClaimEnv), waits until the namespace has been quiet
// for 300 ms (a Ready pod set asks for no resync), and returns its pods' UIDs by name.
func bringUpQuiet(c *suite.Case, spec fixtures.MatrixOneSpec) map[string]types.UID {
	GinkgoHelper()
	newClaimEnv(c, spec)
	c.RequireQuiescent(300*time.Millisecond, claimTimeout)
	return podUIDs(c)
}

// setScaled permits the replicas edit of pod set kind/name and its status following its pods.
func setScaled(kind, name string) suite.Permit {
	return suite.Permits(suite.Modified, kind, name, "spec.replicas", "metadata.generation", "status")
}

// podsAdded permits the creation of the named pods, in this order (the operator creates missing ordinals in
// ascending order, one create after the other), and for each the kubelet fake binding it to the node and
// running it (spec.nodeName, status), however many updates that takes.
func podsAdded(names ...string) []suite.Permit {
	var added suite.Permit
	out := []suite.Permit{}
	for i, n := range names {
		if i == 0 {
			added = suite.Permits(suite.Added, "Pod", n)
		} else {
			added = suite.Before(added, suite.Permits(suite.Added, "Pod", n))
		}
		out = append(out, suite.Permits(suite.Modified, "Pod", n, "spec.nodeName", "status"))
	}
	return append(out, added)
}

// expectUntouched checks that the pods of before that are still there kept their UID and never restarted.
func expectUntouched(c *suite.Case, before map[string]types.UID, gone ...string) {
	GinkgoHelper()
	now := podUIDs(c)
	for name, uid := range before {
		if slices.Contains(gone, name) {
			Expect(now).NotTo(HaveKey(name), "pod %s is still there", name)
			continue
		}
		Expect(now).To(HaveKeyWithValue(name, uid), "pod %s was replaced", name)
		Expect(dp.RestartCount(c.Namespace, name)).To(BeZero(), "pod %s restarted", name)
		p := &corev1.Pod{}
		Expect(c.Get(name, p)).To(Succeed())
		for _, cs := range p.Status.ContainerStatuses {
			Expect(cs.RestartCount).To(BeZero(), "container %s of pod %s restarted", cs.Name, name)
		}
	}
}

var _ = Describe("matrixone pod-set scaling", Label("matrixone"), func() {
	It("a LogSet scaled 1 -> 3 and a DNSet 1 -> 2 add exactly their new ordinal pods and restart none of the existing ones", func() {
		c := s.NewCase(GinkgoT())
		spec := podSetScaleSpec(1, 1, 1)
		names := spec.Names()
		before := bringUpQuiet(c, spec)
		Expect(before).To(HaveLen(3))

		// One step: the DNSet's new pod comes once its LogSet is Ready again (or at once, on a LogSet status
		// not yet written for the new generation), so the two sets' pods have no order between them. In one
		// step, the progressions still running when it settles are further updates Finish allows.
		sc := c.Script("scale up")
		sc.RequireStep("LogSet 1 -> 3, DNSet 1 -> 2", func() error {
			ls, dn := &mov1.LogSet{}, &mov1.DNSet{}
			if err := c.Update(names.LogSet, ls, func() { ls.Spec.Replicas = 3 }); err != nil {
				return err
			}
			return c.Update(names.DNSet, dn, func() { dn.Spec.Replicas = 2 })
		}, append(append(podsAdded(names.LogSet+"-1", names.LogSet+"-2"), podsAdded(names.DNSet+"-1")...),
			setScaled("LogSet", names.LogSet), setScaled("DNSet", names.DNSet))...)
		sc.RequireFinish(500 * time.Millisecond)

		// The sets are Ready once the operator has settled, not at the end of the script's window: a pass that
		// reads its pods late (a lagging cache, a retried write) writes the last status after it.
		c.RequireQuiescent(300*time.Millisecond, claimTimeout)
		Expect(fixtures.MatrixOneReady(GinkgoT().Context(), c.Client, c.Namespace, podSetScaleSpec(3, 2, 1))).To(Succeed())
		expectUntouched(c, before)
		for _, p := range []string{names.LogSet + "-1", names.LogSet + "-2", names.DNSet + "-1"} {
			Expect(dp.RestartCount(c.Namespace, p)).To(BeZero(), "the new pod %s restarted", p)
		}
	})

	It("a ProxySet scaled 2 -> 1 deletes exactly its highest ordinal pod and restarts none of the others", func() {
		c := s.NewCase(GinkgoT())
		spec := podSetScaleSpec(1, 1, 2)
		names := spec.Names()
		before := bringUpQuiet(c, spec)
		last := matrixone.PodSetPodName(names.ProxySet, 1)
		Expect(before).To(HaveKey(last))

		sc := c.Script("scale down")
		// The operator deletes the pod (the API server sets deletionTimestamp and the grace period, and bumps
		// the pod's generation); the kubelet fake terminates its containers (status) and removes it.
		sc.RequireStep("ProxySet 2 -> 1", func() error {
			ps := &mov1.ProxySet{}
			return c.Update(names.ProxySet, ps, func() { ps.Spec.Replicas = 1 })
		}, setScaled("ProxySet", names.ProxySet),
			suite.Permits(suite.Modified, "Pod", last, "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds", "metadata.generation", "status"),
			suite.Permits(suite.Deleted, "Pod", last))
		sc.RequireFinish(500 * time.Millisecond)

		c.RequireQuiescent(300*time.Millisecond, claimTimeout)
		Expect(fixtures.MatrixOneReady(GinkgoT().Context(), c.Client, c.Namespace, podSetScaleSpec(1, 1, 1))).To(Succeed())
		expectUntouched(c, before, last)
	})
})
