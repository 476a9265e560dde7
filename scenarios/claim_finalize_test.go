package scenarios

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ensembletest/ensemble/operators/matrixone"
	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
	"github.com/ensembletest/ensemble/suite"
)

// MO-CLAIM-FINALIZE-STUCK: a claim being deleted finalizes by reclaiming the pods labelled claimed-by it. A
// pod another live claim's spec.podName names (the double bind: B migrated onto A's pod, then A's Sync took
// the label back) is not reclaimed; the corrected Finalize drops its own claimed-by from it and is done, the
// incident's kept the label and never returned done.

// claimFinalizePasses bounds the wait for the claim's deletion in reconcile passes of the claim since the
// delete: the corrected Finalize is done on its first pass, the incident's requeues after FinalizeRequeue
// forever.
const claimFinalizePasses = 20

// claimFinalizer is the CNClaim controller's finalizer.
const claimFinalizer = matrixone.FinalizerPrefix + matrixone.CNClaimControllerName

// doubleBindFinalize builds the state of the incident: claims a and b (owners tenant-a and tenant-b) Bound to
// their own pods, the incident's migrator moves b onto a's pod pA, and a's next Sync takes pA's claimed-by
// label back. It returns pA.
func (e *claimEnv) doubleBindFinalize() string {
	GinkgoHelper()
	e.settlePool(0, 2)
	e.createClaim("a", "tenant-a")
	pa := e.expectBound("a")
	e.createClaim("b", "tenant-b")
	pb := e.expectBound("b")
	e.settlePool(2, 2)
	// The incident's agent whatever MO-CLAIM-DOUBLE-BIND says: it builds the double bind Finalize meets.
	target, err := haKeeper.Migrate(GinkgoT().Context(), e.c.Client, e.key("b"), true)
	Expect(err).NotTo(HaveOccurred())
	Expect(target).To(Equal(pa), "setup: the incident's agent picks the pod another claim uses")
	e.migrated("b", pa, pb)
	// ensureOwnership is unconditional: an annotation change (it passes a's watch filter) makes a's Sync take
	// pA's label; b's own last pass after its migration may take it again, so poke a until a holds it.
	poke := 0
	Eventually(func(g Gomega) {
		poke++
		a := &mov1.CNClaim{}
		g.Expect(e.c.Update("a", a, func() { a.Annotations = map[string]string{"ensemble.test/poke": fmt.Sprint(poke)} })).To(Succeed())
		held := func(g Gomega) { g.Expect(e.pod(g, pa).Labels).To(HaveKeyWithValue(matrixone.LabelClaimedBy, "a")) }
		g.Eventually(held).WithTimeout(time.Second).Should(Succeed())
		g.Consistently(held).WithTimeout(10 * moOptions.ActionRequeue).Should(Succeed())
	}).WithTimeout(claimTimeout).Should(Succeed(), "setup: claim a never held pod %s's claimed-by label", pa)
	return pa
}

// claimFinalizeSpec deletes claim a while the pod it holds the label of is claim b's, and checks that a's
// deletion completes and that the pod stays b's.
func claimFinalizeSpec() {
	c := s.NewCase(GinkgoT())
	claimReportOnExit(c)
	e := newClaimEnv(c, claimClusterSpec(2, 0))
	pa := e.doubleBindFinalize()

	By("deleting claim a")
	deleted := time.Now()
	Expect(c.Delete(&mov1.CNClaim{ObjectMeta: metav1.ObjectMeta{Name: "a"}})).To(Succeed())
	passes := func() int {
		return len(c.Passes(suite.PassFilter{Name: "a", Controller: matrixone.CNClaimControllerName, Since: deleted}))
	}
	gone := func() bool { return apierrors.IsNotFound(c.Get("a", &mov1.CNClaim{})) }
	Eventually(func() bool { return gone() || passes() >= claimFinalizePasses }).WithTimeout(claimTimeout).
		Should(BeTrue(), "claim a was neither deleted nor reconciled %d times", claimFinalizePasses)
	Expect(gone()).To(BeTrue(), "claim a is still there after %d reconcile passes since its deletion: %s",
		passes(), claimFinalizeState(c, pa))
	Eventually(func() bool { return claimFinalizerReleased(c, "a", deleted) }).WithTimeout(claimTimeout).
		Should(BeTrue(), "claim a went, but not by the claim controller releasing %s", claimFinalizer)
	AddReportEntry("claim deletion", fmt.Sprintf("claim a gone %s after its delete, in %d reconcile passes",
		time.Since(deleted).Round(time.Millisecond), passes()))

	By("pod " + pa + " stays claim b's: not reclaimed, its store still Working")
	Eventually(func(g Gomega) {
		p := e.pod(g, pa)
		g.Expect(p.Labels[matrixone.LabelClaimedBy]).NotTo(Equal("a"), "pod %s still claimed-by the deleted claim", pa)
		g.Expect(p.Labels).To(HaveKeyWithValue(matrixone.LabelPhase, matrixone.PhaseBound))
		b := e.claim(g, "b")
		g.Expect(b.Spec.PodName).To(Equal(pa))
		g.Expect(b.Status.Phase).To(Equal(mov1.CNClaimPhaseBound))
		st, ok := haKeeper.PodStore(c.Namespace, pa)
		g.Expect(ok).To(BeTrue(), "pod %s has no store in HAKeeper", pa)
		g.Expect(st.WorkState).To(Equal(hakeeper.WorkStateWorking))
	}).WithTimeout(claimTimeout).Should(Succeed(), "claim b lost its pod %s to a's Finalize", pa)
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod", Name: pa, Since: deleted}) {
		for _, f := range ch.Fields {
			Expect(f.Path+"="+f.New).NotTo(Equal("metadata.labels."+matrixone.LabelPhase+"="+matrixone.PhaseDraining),
				"a's Finalize reclaimed pod %s, which claim b uses: %s", pa, ch)
		}
	}
}

// claimFinalizeState renders, for a failure, claim a's finalizers and deletion state and pod pa's claimed-by
// and phase labels.
func claimFinalizeState(c *suite.Case, pa string) string {
	var parts []string
	a := &mov1.CNClaim{}
	if err := c.Get("a", a); err == nil {
		parts = append(parts, fmt.Sprintf("claim a has finalizers [%s], deletionTimestamp %v", strings.Join(a.Finalizers, ", "), a.DeletionTimestamp))
	}
	p := &corev1.Pod{}
	if err := c.Get(pa, p); err == nil {
		parts = append(parts, fmt.Sprintf("pod %s is claimed-by %q, phase %q", pa, p.Labels[matrixone.LabelClaimedBy], p.Labels[matrixone.LabelPhase]))
	}
	return strings.Join(parts, "; ")
}

// claimFinalizerReleased reports whether the claim controller released claim name's finalizer since since: a
// successful main-resource write of the claim by that controller, then the claim's Deleted change (removing the
// last finalizer of a claim being deleted deletes it, with no Modified change in between).
func claimFinalizerReleased(c *suite.Case, name string, since time.Time) bool {
	released := false
	for _, w := range c.Writes(suite.WriteFilter{Kind: "CNClaim", Name: name, Controller: matrixone.CNClaimControllerName, Since: since}) {
		released = released || (w.Subresource == "" && (w.Verb == suite.VerbUpdate || w.Verb == suite.VerbPatch))
	}
	return released && len(c.Changes(suite.ChangeFilter{Kind: "CNClaim", Name: name, Type: suite.Deleted, Since: since})) == 1
}
