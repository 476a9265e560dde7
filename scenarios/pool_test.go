package scenarios

import (
	"slices"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/operators/matrixone"
	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// The CNPool and CNClaimSet joints: a claim set scaled out and back in, and a pool sized by its in-use
// pods, its pending claims and maxIdle (docs/architecture.md §7 CNPool, CNClaimSet). Both run with CNPool,
// CNClaim, CNClaimSet and CNStore in the suite's gated "matrixone" manager and the HAKeeper fake's CN
// processes, on the claim specs' cluster (claim_test.go).

// phasePath is the stream's path of a pod's pool phase label.
const phasePath = "metadata.labels." + matrixone.LabelPhase

// phaseHistory returns the pool phases pod name went through in the changes after revision after (see
// revision): the phase before its first phase change, then each new phase ([] when it never changed).
func phaseHistory(c *suite.Case, name string, after int64) []string {
	var out []string
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod", Name: name}) {
		if rv(ch) <= after {
			continue
		}
		for _, f := range ch.Fields {
			if f.Path == phasePath {
				if len(out) == 0 {
					out = append(out, f.Old)
				}
				out = append(out, f.New)
			}
		}
	}
	return out
}

// deletedPods returns the names of the case's pods deleted after revision after (see revision).
func deletedPods(c *suite.Case, after int64) []string {
	var out []string
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod", Type: suite.Deleted}) {
		if rv(ch) > after {
			out = append(out, ch.Name)
		}
	}
	return out
}

// revision returns the API server's resourceVersion now (an etcd revision, as a number), read from a list
// of the case's pods: every change the API server made before the list has a resourceVersion at most this,
// every later one a greater. The stream stamps a change with the time it saw it, which trails the API
// reads a spec waits on, so a pod deletion a step waited for can carry a time after the next step began:
// a step's boundary in the stream is a revision, not a time.
func revision(c *suite.Case) int64 {
	GinkgoHelper()
	pods := &corev1.PodList{}
	Expect(c.List(pods, client.Limit(1))).To(Succeed())
	n, err := strconv.ParseInt(pods.ResourceVersion, 10, 64)
	Expect(err).NotTo(HaveOccurred(), "resourceVersion %q of a pod list", pods.ResourceVersion)
	return n
}

// setClaimSetReplicas sets spec.replicas of claim set name.
func setClaimSetReplicas(c *suite.Case, name string, n int32) {
	GinkgoHelper()
	cs := &mov1.CNClaimSet{}
	Expect(c.Update(name, cs, func() { cs.Spec.Replicas = n })).To(Succeed())
}

// expectClaimSet waits until claim set name counts n claims, all Bound, and exactly n live claims carry its
// label; it returns their names, sorted.
func (e *claimEnv) expectClaimSet(name string, n int) []string {
	GinkgoHelper()
	var names []string
	Eventually(func(g Gomega) {
		cs := &mov1.CNClaimSet{}
		g.Expect(e.c.Get(name, cs)).To(Succeed())
		g.Expect(cs.Status.Replicas).To(BeEquivalentTo(n))
		g.Expect(cs.Status.ReadyReplicas).To(BeEquivalentTo(n))
		claims := &mov1.CNClaimList{}
		g.Expect(e.c.List(claims, client.MatchingLabels{matrixone.LabelClaimSet: name})).To(Succeed())
		names = nil
		for _, cl := range claims.Items {
			if cl.DeletionTimestamp.IsZero() {
				names = append(names, cl.Name)
			}
		}
		g.Expect(names).To(HaveLen(n))
	}).WithTimeout(claimTimeout).Should(Succeed(), "claim set %s never settled at %d Bound claims", name, n)
	slices.Sort(names)
	return names
}

// poolStatus returns the pool's status.
func (e *claimEnv) poolStatus(g Gomega) mov1.CNPoolStatus {
	p := &mov1.CNPool{}
	g.Expect(e.c.Get(e.spec.Names().Pool, p)).To(Succeed())
	return p.Status
}

// poolPods returns the names of the pool's pods in phase phase, sorted.
func (e *claimEnv) poolPods(phase string) []string {
	GinkgoHelper()
	pods := &corev1.PodList{}
	Expect(e.c.List(pods, client.MatchingLabels{matrixone.LabelPoolName: e.spec.Names().Pool, matrixone.LabelPhase: phase})).To(Succeed())
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

var _ = Describe("matrixone CNPool and CNClaimSet", Label("matrixone", "claim"), func() {
	It("a CNClaimSet scaled 1 -> 3 -> 1: the new claims bind distinct Idle pods, the released pods drain back to Idle and the pool keeps in-use + maxIdle", func() {
		c := s.NewCase(GinkgoT())
		claimReportOnExit(c)
		c.Invariant(claimBindingInvariant, claimBindingHolds)
		spec := claimClusterSpec(1, 1)
		set := spec.Names().ClaimSet
		e := newClaimEnv(c, spec)
		e.settlePool(1, 1)

		By("scaling the claim set out to 3 claims")
		setClaimSetReplicas(c, set, 3)
		claims := e.expectClaimSet(set, 3)
		podOf := map[string]string{}
		for _, cl := range claims {
			podOf[cl] = e.expectBound(cl)
		}
		Expect(sets.New(podOf[claims[0]], podOf[claims[1]], podOf[claims[2]]).Len()).To(Equal(3), "claims share a pod: %v", podOf)
		// The stream may trail the API reads above by a few events.
		Eventually(func(g Gomega) {
			for cl, p := range podOf {
				h := phaseHistory(c, p, 0)
				i := slices.Index(h, matrixone.PhaseBound)
				g.Expect(i).To(BeNumerically(">", 0), "pod %s of claim %s: phases %v", p, cl, h)
				g.Expect(h[i-1]).To(Equal(matrixone.PhaseIdle), "claim %s bound pod %s before it was Idle: phases %v", cl, p, h)
			}
		}).WithTimeout(claimTimeout).Should(Succeed())
		e.settlePool(3, 1)

		By("scaling the claim set back in to 1 claim")
		uids := podUIDs(c)
		// A pod the pool made for a pending claim during the scale-out and deleted as surplus may reach the
		// stream only after this point: the scale-in's changes are those after this revision.
		scaledIn := revision(c)
		setClaimSetReplicas(c, set, 1)
		left := e.expectClaimSet(set, 1)
		// All three are Bound with the same deletion cost (no sessions): the set keeps the last by name.
		Expect(left).To(Equal(claims[2:]), "the set scaled in by its own order: no pod, phase, pod deletion cost, then name")
		survivor := left[0]
		Expect(e.expectBound(survivor)).To(Equal(podOf[survivor]))
		e.settlePool(1, 1)
		Expect(podUIDs(c)).To(HaveKeyWithValue(podOf[survivor], uids[podOf[survivor]]))

		By("the released pods drained back to Idle; the pool scaled the surplus idle pods in")
		Eventually(func(g Gomega) {
			for _, cl := range claims[:2] {
				h := phaseHistory(c, podOf[cl], scaledIn)
				g.Expect(len(h)).To(BeNumerically(">=", 3), "pod %s of deleted claim %s: phases %v", podOf[cl], cl, h)
				g.Expect(h[:3]).To(Equal([]string{matrixone.PhaseBound, matrixone.PhaseDraining, matrixone.PhaseIdle}),
					"pod %s of deleted claim %s: phases %v", podOf[cl], cl, h)
			}
			gone := deletedPods(c, scaledIn)
			g.Expect(gone).To(HaveLen(2), "pods deleted: 1 in use + maxIdle 1 were to stay of 4")
			for _, p := range gone {
				h := phaseHistory(c, p, scaledIn)
				g.Expect(len(h)).To(BeNumerically(">=", 2), "pod %s deleted: phases %v", p, h)
				g.Expect(h[len(h)-2:]).To(Equal([]string{matrixone.PhaseIdle, matrixone.PhaseTerminating}), "pod %s deleted: phases %v", p, h)
				_, ok := haKeeper.PodStore(c.Namespace, p)
				g.Expect(ok).To(BeFalse(), "the store of deleted pod %s is still in HAKeeper", p)
			}
		}).WithTimeout(claimTimeout).Should(Succeed())
		Expect(phaseHistory(c, podOf[survivor], scaledIn)).To(BeEmpty(), "the kept claim's pod changed phase")
		idle := e.poolPods(matrixone.PhaseIdle)
		pod := &corev1.Pod{}
		Expect(c.Get(idle[0], pod)).To(Succeed())
		Expect(pod.Labels).NotTo(HaveKey(matrixone.LabelClaimedBy))
		if slices.Contains([]string{podOf[claims[0]], podOf[claims[1]]}, idle[0]) {
			Expect(pod.Labels).To(HaveKeyWithValue(matrixone.LabelLastOwner, set), "a released pod remembers its owner")
		}
		c.RequireInvariants()
	})

	It("a CNPool keeps in-use + pending + maxIdle pods: a pending claim gets a pod made for it, a raised maxIdle adds idle pods, a deleted Idle pod is replaced", func() {
		c := s.NewCase(GinkgoT())
		claimReportOnExit(c)
		spec := claimClusterSpec(0, 0)
		pool := spec.Names().Pool
		e := newClaimEnv(c, spec)
		e.settlePool(0, 0)

		By("a claim with no idle pod to bind: pending, so the pool makes a pod for it")
		e.createClaim("a", "tenant")
		pa := e.expectBound("a")
		e.settlePool(1, 0)
		Eventually(func() bool {
			for _, ch := range c.Changes(suite.ChangeFilter{Kind: "CNPool", Name: pool}) {
				for _, f := range ch.Fields {
					if f.Path == "status.pendingClaims" && f.New == "1" {
						return true
					}
				}
			}
			return false
		}).WithTimeout(claimTimeout).Should(BeTrue(), "the pool never counted the pending claim")

		By("maxIdle 0 -> 2: two idle pods beside the one in use")
		p := &mov1.CNPool{}
		Expect(c.Update(pool, p, func() { p.Spec.Strategy.ScaleStrategy.MaxIdle = 2 })).To(Succeed())
		e.settlePool(1, 2)
		idle := e.poolPods(matrixone.PhaseIdle)
		uid := podUIDs(c)[pa]

		By("deleting an Idle pod: the pool replaces it")
		deleted := revision(c)
		Expect(c.Delete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: idle[0]}})).To(Succeed())
		Eventually(func() []string { return deletedPods(c, deleted) }).WithTimeout(claimTimeout).
			Should(ConsistOf(idle[0]), "pod %s was never deleted (CNStore drains it first)", idle[0])
		e.settlePool(1, 2)
		now := e.poolPods(matrixone.PhaseIdle)
		Expect(now).To(ContainElement(idle[1]))
		Expect(now).NotTo(ContainElement(idle[0]))
		Expect(e.expectBound("a")).To(Equal(pa))
		Expect(podUIDs(c)).To(HaveKeyWithValue(pa, uid), "the pod in use was replaced")
		Eventually(func(g Gomega) {
			g.Expect(e.poolStatus(g)).To(Equal(mov1.CNPoolStatus{TotalPods: 3, IdlePods: 2, InUsePods: 1}))
		}).WithTimeout(claimTimeout).Should(Succeed())
		_, ok := haKeeper.PodStore(c.Namespace, idle[0])
		Expect(ok).To(BeFalse(), "the store of deleted pod %s is still in HAKeeper", idle[0])
	})
})
