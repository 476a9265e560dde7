package scenarios

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fakehk "github.com/ensembletest/ensemble/fakes/hakeeperfake"
	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/matrixone"
	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
	"github.com/ensembletest/ensemble/suite"
)

// The CNClaim joints of the MatrixOne operator (issue 3, items 5b-5d): CNClaim, CNClaimSet, CNPool and CNStore
// reconcile together in the suite's gated "matrixone" manager, with the HAKeeper fake (its CN processes, drain
// model and migrator agent) and the data plane. Each spec runs a small MatrixOne cluster in its own namespace.

// claimTimeout bounds every wait of these specs for something the operator does in a few hundred ms.
const claimTimeout = 30 * time.Second

// claimClusterSpec is the cluster of the claim specs: one pod per LogSet, DNSet and ProxySet (the claims only
// need the LogSet's HAKeeper), a pool keeping maxIdle idle CN pods, and a claim set of claimSet claims.
func claimClusterSpec(maxIdle, claimSet int32) fixtures.MatrixOneSpec {
	one := ptr.To[int32](1)
	return fixtures.MatrixOneSpec{LogSetReplicas: one, DNSetReplicas: one, ProxySetReplicas: one,
		PoolMaxIdle: ptr.To(maxIdle), ClaimSetReplicas: claimSet}
}

// claimEnv is one claim spec's cluster.
type claimEnv struct {
	c    *suite.Case
	spec fixtures.MatrixOneSpec
}

// newClaimEnv creates spec's cluster in the case and waits until it is up (fixtures.MatrixOneReady: pod sets
// Ready, every claim of the claim set Bound).
func newClaimEnv(c *suite.Case, spec fixtures.MatrixOneSpec) *claimEnv {
	GinkgoHelper()
	objs, err := fixtures.MatrixOne(spec)
	Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		Expect(c.Create(o)).To(Succeed())
	}
	Eventually(func() error { return fixtures.MatrixOneReady(GinkgoT().Context(), c.Client, c.Namespace, spec) }).
		WithTimeout(claimTimeout).Should(Succeed(), "the MatrixOne cluster never came up")
	return &claimEnv{c: c, spec: spec}
}

func (e *claimEnv) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: e.c.Namespace, Name: name}
}

func (e *claimEnv) claim(g Gomega, name string) *mov1.CNClaim {
	cl := &mov1.CNClaim{}
	g.Expect(e.c.Get(name, cl)).To(Succeed())
	return cl
}

func (e *claimEnv) pod(g Gomega, name string) *corev1.Pod {
	p := &corev1.Pod{}
	g.Expect(e.c.Get(name, p)).To(Succeed())
	return p
}

// createClaim creates a claim on the pool with the given owner (fixtures' CNClaim).
func (e *claimEnv) createClaim(name, owner string) {
	GinkgoHelper()
	Expect(e.c.Create(e.spec.CNClaim(name, owner))).To(Succeed())
}

// settlePool waits until the pool is stable: exactly inUse Bound and idle Idle pods, none Unknown, Draining,
// Terminating or being deleted, so that no scale-in races the migrator's pick of a target.
func (e *claimEnv) settlePool(inUse, idle int) {
	GinkgoHelper()
	pool := e.spec.Names().Pool
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(e.c.List(pods, client.MatchingLabels{matrixone.LabelPoolName: pool})).To(Succeed())
		count := map[string]int{}
		for _, p := range pods.Items {
			g.Expect(p.DeletionTimestamp).To(BeNil(), "pod %s is being deleted", p.Name)
			count[p.Labels[matrixone.LabelPhase]]++
		}
		want := map[string]int{}
		for phase, n := range map[string]int{matrixone.PhaseBound: inUse, matrixone.PhaseIdle: idle} {
			if n > 0 {
				want[phase] = n
			}
		}
		g.Expect(count).To(Equal(want))
	}).WithTimeout(claimTimeout).Should(Succeed(), "the pool never settled at %d Bound and %d Idle pods", inUse, idle)
}

// expectBound waits until claim name is Bound with no migration running, its pod labelled Bound and
// claimed-by the claim, and the pod's store Working in HAKeeper; it returns the pod's name.
func (e *claimEnv) expectBound(name string) string {
	GinkgoHelper()
	var pod string
	Eventually(func(g Gomega) {
		cl := e.claim(g, name)
		g.Expect(cl.Status.Phase).To(Equal(mov1.CNClaimPhaseBound))
		g.Expect(cl.Spec.SourcePod).To(BeNil())
		g.Expect(cl.Status.Migrate).To(BeNil())
		g.Expect(cl.Spec.PodName).NotTo(BeEmpty())
		g.Expect(cl.Status.Store.PodName).To(Equal(cl.Spec.PodName))
		p := e.pod(g, cl.Spec.PodName)
		g.Expect(p.Labels).To(HaveKeyWithValue(matrixone.LabelPhase, matrixone.PhaseBound))
		g.Expect(p.Labels).To(HaveKeyWithValue(matrixone.LabelClaimedBy, name))
		st, ok := haKeeper.PodStore(e.c.Namespace, p.Name)
		g.Expect(ok).To(BeTrue(), "pod %s has no store in HAKeeper", p.Name)
		g.Expect(st.WorkState).To(Equal(hakeeper.WorkStateWorking))
		g.Expect(cl.Status.Store.ServiceID).To(Equal(st.UUID))
		pod = cl.Spec.PodName
	}).WithTimeout(claimTimeout).Should(Succeed(), "claim %s never settled Bound", name)
	return pod
}

// migrated waits until claim name's migration to target has ended: spec.podName is target, no source, no
// progress, status Bound on target's store, and the source pod no longer Bound or Draining (Idle, Terminating
// or gone: the pool may scale it in). It asserts nothing about the other claims.
func (e *claimEnv) migrated(name, target, source string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		cl := e.claim(g, name)
		g.Expect(cl.Spec.PodName).To(Equal(target))
		g.Expect(cl.Spec.SourcePod).To(BeNil())
		g.Expect(cl.Status.Migrate).To(BeNil())
		g.Expect(cl.Status.Phase).To(Equal(mov1.CNClaimPhaseBound))
		g.Expect(cl.Status.Store.PodName).To(Equal(target))
		p := &corev1.Pod{}
		if err := e.c.Get(source, p); !apierrors.IsNotFound(err) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Labels[matrixone.LabelPhase]).To(BeElementOf(matrixone.PhaseIdle, matrixone.PhaseTerminating),
				"the source %s drains back to the pool", source)
		}
	}).WithTimeout(claimTimeout).Should(Succeed(), "the migration of claim %s from %s to %s never ended", name, source, target)
}

// claimReportOnExit adds, when the spec ends (passed or not), the namespace's HAKeeper calls per operation,
// the restarts of its pods (summed over every pod the event stream saw that still exists: the data plane
// forgets a deleted pod's count) and the spec's duration. Register it right after NewCase: cleanups run last
// registered first, so it runs before the case empties the namespace.
func claimReportOnExit(c *suite.Case) {
	DeferCleanup(func() {
		calls := haKeeper.Calls(c.Namespace)
		ops := make([]string, 0, len(calls))
		operator := 0
		for op, n := range calls {
			ops = append(ops, fmt.Sprintf("%s=%d", op, n))
			if claimOperatorCalls.Has(op) {
				operator += n
			}
		}
		sort.Strings(ops)
		pods := sets.New[string]()
		for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod"}) {
			pods.Insert(ch.Name)
		}
		restarts := 0
		for _, p := range sets.List(pods) {
			restarts += int(dp.RestartCount(c.Namespace, p))
		}
		AddReportEntry("HAKeeper calls", fmt.Sprintf("%d by the operator; all: %s", operator, strings.Join(ops, " ")))
		AddReportEntry("pod restarts", fmt.Sprintf("%d over %d pods", restarts, pods.Len()))
		AddReportEntry("spec duration", time.Since(c.Started).Round(time.Millisecond).String())
	})
}

// claimOperatorCalls are the HAKeeper fake's operations the operator calls (the others are CN processes
// registering, the instance's creation, and the spec's own settings and migrations).
var claimOperatorCalls = sets.New(fakehk.OpGetClusterDetails, fakehk.OpPatchCNStore, fakehk.OpUpdateCNLabel,
	fakehk.OpUpdateCNWorkState, fakehk.OpDeleteCNStore, fakehk.OpGetCNState)

// claimBindingInvariant is the double-binding invariant's name.
const claimBindingInvariant = "no pod is the spec.podName of two live claims, nor claimed-by a claim bound elsewhere"

// claimBindingHolds is the invariant of MO-CLAIM-DOUBLE-BIND over the namespace's live claims (not being
// deleted, not Lost) and CN pods: no pod is the spec.podName of two live claims, and no pod's claimed-by label
// names a live claim whose spec.podName is another pod. Two states are not a disagreement: a claim still
// binding (claimed-by written, spec.podName not yet: ensureOwnership comes first) and a migration's source
// (claimed-by kept until the claim reclaims it, spec.sourcePod names it).
func claimBindingHolds(ctx context.Context, r client.Reader, ns string) error {
	claims := &mov1.CNClaimList{}
	if err := r.List(ctx, claims, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list claims: %w", err)
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{matrixone.LabelComponent: matrixone.ComponentCN}); err != nil {
		return fmt.Errorf("list CN pods: %w", err)
	}
	live := map[string]*mov1.CNClaim{}
	byPod := map[string][]string{}
	for i := range claims.Items {
		cl := &claims.Items[i]
		if !cl.DeletionTimestamp.IsZero() || cl.Status.Phase == mov1.CNClaimPhaseLost {
			continue
		}
		live[cl.Name] = cl
		if cl.Spec.PodName != "" {
			byPod[cl.Spec.PodName] = append(byPod[cl.Spec.PodName], cl.Name)
		}
	}
	var bad []string
	for pod, names := range byPod {
		if len(names) > 1 {
			sort.Strings(names)
			bad = append(bad, fmt.Sprintf("pod %s is the spec.podName of live claims %s", pod, strings.Join(names, " and ")))
		}
	}
	for _, p := range pods.Items {
		cl := live[p.Labels[matrixone.LabelClaimedBy]]
		if cl == nil || cl.Spec.PodName == "" || cl.Spec.PodName == p.Name ||
			(cl.Spec.SourcePod != nil && cl.Spec.SourcePod.PodName == p.Name) {
			continue
		}
		bad = append(bad, fmt.Sprintf("pod %s is claimed-by %s, whose spec.podName is %s", p.Name, cl.Name, cl.Spec.PodName))
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

var _ = Describe("matrixone CNClaim", Label("matrixone", "claim"), func() {
	It("CNClaim double binding: the incident replayed with the migrator never puts two live claims on one pod", Label("pin"), claimDoubleBindingSpec)

	It("claim bound to a deleted pod: the claim goes Lost with spec.podName cleared and its claim set replaces it", Label("pin"), claimDeletedPodSpec)

	It("migration storm: a migrating claim's reconcile passes over 20 s of the operator's time", Label("pin"), claimMigrationStormSpec)

	It("deleting a claim whose pod another claim uses: the deletion completes and the pod stays the other claim's", claimFinalizeSpec)
})

// claimDoubleBindingSpec replays the CNClaim double binding incident (MO-CLAIM-DOUBLE-BIND): claim A
// is migrated off its pod, claim B binds that pod and is migrated too, while the binding invariant watches
// every state of the namespace.
func claimDoubleBindingSpec(ctx SpecContext) {
	c := s.NewCase(GinkgoT())
	claimReportOnExit(c)
	// Registered before anything exists: every state of the replay is checked, transient ones included.
	c.Invariant(claimBindingInvariant, claimBindingHolds)
	// The migrator agent is the incident's (any pool pod but the source, used ones preferred) while the
	// defect is live, the corrected one (idle, unreferenced pods only) once fixed: the catalog entry covers both.
	live := moOptions.IsLive(matrixone.DefectClaimDoubleBind)
	e := newClaimEnv(c, claimClusterSpec(2, 0))
	e.settlePool(0, 2)

	By("claim A binds p1; the migrator moves A to p2; p1 drains back to Idle")
	e.createClaim("a", "tenant")
	p1 := e.expectBound("a")
	e.settlePool(1, 2)
	p2, err := haKeeper.Migrate(ctx, c.Client, e.key("a"), live)
	Expect(err).NotTo(HaveOccurred())
	Expect(p2).NotTo(Equal(p1), "the migrator moved A onto its own pod")
	Expect(e.expectBound("a")).To(Equal(p2))
	Eventually(func(g Gomega) {
		p := e.pod(g, p1)
		g.Expect(p.Labels).To(HaveKeyWithValue(matrixone.LabelPhase, matrixone.PhaseIdle))
		g.Expect(p.Labels).To(HaveKeyWithValue(matrixone.LabelLastOwner, "tenant"))
		g.Expect(p.Labels).NotTo(HaveKey(matrixone.LabelClaimedBy))
	}).WithTimeout(claimTimeout).Should(Succeed(), "p1 never drained back to Idle")

	By("claim B (same owner) binds p1; the migrator moves B")
	e.createClaim("b", "tenant")
	Expect(e.expectBound("b")).To(Equal(p1), "B prefers the pod its owner used last")
	e.settlePool(2, 2) // maxIdle idle pods again: the corrected agent has a free target
	target, err := haKeeper.Migrate(ctx, c.Client, e.key("b"), live)
	Expect(err).NotTo(HaveOccurred())
	Expect(target).NotTo(Equal(p1), "the migrator moved B onto its own pod")
	e.migrated("b", target, p1)

	c.KnownDefect(matrixone.DefectClaimDoubleBind, func() error {
		// The pin takes the violation as its evidence, so the case's cleanup does not fail on it again.
		// An unknown invariant name is a harness error; wrapped below, it still fails the pin.
		err := c.TakeViolation(claimBindingInvariant)
		if err == nil {
			// The invariant runs on its own goroutine after each change: check the final state here too, in
			// case the last change has not been checked yet.
			if ferr := claimBindingHolds(ctx, c.Reader(), c.Namespace); ferr != nil {
				err = fmt.Errorf("invariant %q violated at the end of the replay: %w", claimBindingInvariant, ferr)
			}
		}
		if err != nil {
			return fmt.Errorf("A moved %s -> %s, B moved %s -> %s: %w", p1, p2, p1, target, err)
		}
		return nil
	})
}

// claimDeletedPodSpec deletes a pod two claims name (MO-CLAIM-BOUND-TO-MISSING-POD) and checks that both
// claims go Lost with spec.podName cleared within the operator's cache timeout plus one resync, and that their
// claim set replaces them.
func claimDeletedPodSpec(ctx SpecContext) {
	c := s.NewCase(GinkgoT())
	claimReportOnExit(c)
	spec := claimClusterSpec(2, 2)
	e := newClaimEnv(c, spec)
	set := &mov1.CNClaimSet{}
	Expect(c.Get(spec.Names().ClaimSet, set)).To(Succeed())
	Expect(set.Status.Claims).To(HaveLen(2))
	a, b := set.Status.Claims[0].ClaimName, set.Status.Claims[1].ClaimName
	pa := e.expectBound(a)
	Expect(e.expectBound(b)).NotTo(Equal(pa))
	e.settlePool(2, 2)

	By("setup: the incident's migrator moves B onto A's pod, whose claimed-by label then names B")
	// This is the incident's agent whatever MO-CLAIM-DOUBLE-BIND says: it builds the state in which a pod's
	// label no longer names a claim bound to it. The defect under test is what the operator does when that
	// pod goes away.
	pb := e.claimPod(b)
	target, err := haKeeper.Migrate(ctx, c.Client, e.key(b), true)
	Expect(err).NotTo(HaveOccurred())
	Expect(target).To(Equal(pa), "setup: the incident's agent picks the pod another claim uses")
	e.migrated(b, pa, pb)
	Eventually(func(g Gomega) {
		g.Expect(e.pod(g, pa).Labels).To(HaveKeyWithValue(matrixone.LabelClaimedBy, b))
		cl := e.claim(g, a)
		g.Expect(cl.Spec.PodName).To(Equal(pa))
		g.Expect(cl.Status.Phase).To(Equal(mov1.CNClaimPhaseBound))
	}).WithTimeout(claimTimeout).Should(Succeed(), "setup: pod %s never claimed-by %s with %s still Bound to it", pa, b, a)

	By("deleting A's pod, which both claims name")
	deleted := time.Now()
	Expect(c.Delete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pa}})).To(Succeed())
	Eventually(func() []suite.Change {
		return c.Changes(suite.ChangeFilter{Kind: "Pod", Name: pa, Type: suite.Deleted})
	}).WithTimeout(claimTimeout).ShouldNot(BeEmpty(), "pod %s was never deleted (CNStore drains it first)", pa)
	// The claim the pod's claimed-by label names (B, unless A took the label back meanwhile) is told in every
	// version: once it went Lost, the claim controller has handled the pod's termination (the data plane
	// reports a pod kept by its finalizer as Succeeded) or its removal.
	Eventually(func() bool {
		lostA, _ := claimLostCleared(c, a)
		lostB, _ := claimLostCleared(c, b)
		return lostA || lostB
	}).WithTimeout(claimTimeout).Should(BeTrue(), "neither %s nor %s went Lost after their pod %s was deleted", a, b, pa)

	// The observation window is a Consistently over the operator's cache timeout plus one resync (its own
	// durations, scaled), started once the claim controller has handled the deletion: the corrected pod
	// watch hands every claim naming the pod to the controller on those same events, and their passes find
	// the pod terminated or gone long after they bound (past the cache timeout), so they go Lost and clear
	// spec.podName at once. Counting the claim's passes would not do: the defect is precisely that the claim
	// the label does not name gets none.
	window := moOptions.WaitCacheTimeout + moOptions.WaitCacheRequeue
	quiet := NewGomega(func(string, ...int) {})
	namingPod := func() []string {
		var out []string
		for _, name := range []string{a, b} {
			cl := &mov1.CNClaim{}
			if err := c.Get(name, cl); err == nil && cl.DeletionTimestamp.IsZero() && cl.Spec.PodName == pa {
				out = append(out, fmt.Sprintf("%s (%s)", name, cl.Status.Phase))
			}
		}
		return out
	}
	stuck := quiet.Consistently(namingPod).WithTimeout(window).WithPolling(5 * time.Millisecond).ShouldNot(BeEmpty())

	c.KnownDefect(matrixone.DefectClaimBoundToMissingPod, func() error {
		var bad []string
		if stuck {
			bad = append(bad, fmt.Sprintf("still naming pod %s %s after its deletion: %s", pa,
				time.Since(deleted).Round(time.Millisecond), strings.Join(namingPod(), ", ")))
		}
		for _, name := range []string{a, b} {
			if lost, cleared := claimLostCleared(c, name); lost && !cleared {
				bad = append(bad, fmt.Sprintf("%s went Lost but kept spec.podName %s", name, pa))
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("claims %s and %s named pod %s (cache timeout plus one resync: %s of the operator's time, %s here): %s",
				a, b, pa, time.Duration(float64(window)/fixtures.TimeScale), window, strings.Join(bad, "; "))
		}
		var latency []string
		for _, name := range []string{a, b} {
			lost, cleared := claimLostCleared(c, name)
			if !lost || !cleared {
				return suite.Harness(fmt.Errorf("claim %s stopped naming the deleted pod %s without going Lost and clearing spec.podName (lost=%v cleared=%v)", name, pa, lost, cleared))
			}
			latency = append(latency, fmt.Sprintf("%s %s", name, claimClearedAfter(c, name, deleted)))
		}
		// Replaced: the set counts two claims again, both Bound, neither of the lost ones.
		if !quiet.Eventually(func(g Gomega) {
			cs := &mov1.CNClaimSet{}
			g.Expect(c.Get(spec.Names().ClaimSet, cs)).To(Succeed())
			g.Expect(cs.Status.Replicas).To(BeEquivalentTo(2))
			g.Expect(cs.Status.ReadyReplicas).To(BeEquivalentTo(2))
			for _, cl := range cs.Status.Claims {
				g.Expect(cl.ClaimName).NotTo(BeElementOf(a, b))
			}
		}).WithTimeout(claimTimeout).Should(Succeed()) {
			return suite.Harness(fmt.Errorf("claims %s and %s went Lost with spec.podName cleared, but their claim set never replaced them", a, b))
		}
		AddReportEntry("pod deletion -> spec.podName cleared", strings.Join(latency, ", "))
		return nil
	})
}

// claimMigrationStormSpec migrates a claim off a pod whose sessions drain slowly and counts the claim's
// reconcile passes over 20 s of the operator's time (MO-MIGRATION-STORM).
func claimMigrationStormSpec(ctx SpecContext) {
	c := s.NewCase(GinkgoT())
	claimReportOnExit(c)
	e := newClaimEnv(c, claimClusterSpec(1, 0))
	e.settlePool(0, 1)
	e.createClaim("a", "tenant")
	p1 := e.expectBound("a")
	st, ok := haKeeper.PodStore(c.Namespace, p1)
	Expect(ok).To(BeTrue())
	// The storm needs the source's session count to move between two passes of the claim, as the incident's
	// did. The suite's HAKeeper drains one session per DrainTick (10 ms here: 1 s of the operator's time),
	// slower than a pass of the miniature takes at this scale, so a client leaves the source every
	// millisecond until the window is covered (claimChurn); then its sessions drop to 0 and the drain ends.
	const sessions = 2000
	Expect(haKeeper.SetSessions(c.Namespace, st.UUID, sessions)).To(Succeed())
	e.settlePool(1, 1)
	stopChurn := claimChurn(c.Namespace, st.UUID, sessions)
	DeferCleanup(stopChurn)

	By("the migrator moves the claim; the source drains")
	// The corrected agent (an idle pod): the storm does not depend on the target.
	_, err := haKeeper.Migrate(ctx, c.Client, e.key("a"), false)
	Expect(err).NotTo(HaveOccurred())
	// The polls below read the suite's cache, not the API server: a poll every millisecond must not load
	// the API server the claim's passes write to (their wall time is the operator's time here).
	migrating := func() (progress, source bool) {
		cl := &mov1.CNClaim{}
		if err := c.Reader().Get(ctx, e.key("a"), cl); err != nil {
			return false, true // unknown: neither progress nor the end of the migration
		}
		return cl.Status.Migrate != nil, cl.Spec.SourcePod != nil
	}
	Eventually(func() bool {
		progress, _ := migrating()
		return progress
	}).WithTimeout(claimTimeout).WithPolling(time.Millisecond).Should(BeTrue(), "the claim never reported migration progress")
	start := time.Now()

	// A storm is the claim waking itself: an event (its own status write) wakes the next pass before the
	// requeue its previous pass asked for. Such a pass costs the operator none of the time it would wait, so
	// the window is 20 s of the operator's requeue time (suite.CountWakes's RequeueTime, at the fixtures'
	// scale) and the verdict counts event-woken passes, not wall time: a loaded machine makes the storm
	// slower, not smaller. The storm is proven at its 10th self-woken pass.
	window := time.Duration(float64(20*time.Second) * fixtures.TimeScale)
	var selfWoken int
	var waited time.Duration
	ended := false
	Eventually(func() bool {
		w := suite.CountWakes(c.Passes(suite.PassFilter{Name: "a", Controller: matrixone.CNClaimControllerName, Since: start}))
		selfWoken, waited = w.Events, w.RequeueTime
		_, source := migrating()
		ended = !source
		return selfWoken >= 10 || waited >= window || ended
	}).WithTimeout(claimTimeout).WithPolling(5*time.Millisecond).Should(BeTrue(), "the claim was not reconciled through the window")
	stopChurn()
	AddReportEntry("migrating claim's self-woken passes", fmt.Sprintf("%d within %s of requeue time (%s at the operator's scale)",
		selfWoken, time.Duration(float64(waited)/fixtures.TimeScale).Round(time.Second), waited), ReportEntryVisibilityAlways)

	c.KnownDefect(matrixone.DefectMigrationStorm, func() error {
		switch {
		case selfWoken >= 10:
			return fmt.Errorf("%d passes woke themselves before 20 s of the operator's requeue time passed", selfWoken)
		case waited >= window && selfWoken <= 3:
			return nil
		case ended:
			// Passes after the end of the migration are not a migrating claim's: no verdict.
			return suite.Harness(fmt.Errorf("the migration ended after %d self-woken passes, before 20 s of requeue time", selfWoken))
		}
		return suite.Harness(fmt.Errorf("%d self-woken passes in 20 s of the operator's requeue time: neither fixed (at most 3) nor a storm (at least 10)", selfWoken))
	})
}

// claimPod returns the spec.podName of claim name (which must exist).
func (e *claimEnv) claimPod(name string) string {
	GinkgoHelper()
	return e.claim(Default, name).Spec.PodName
}

// claimLostCleared reports, from the event stream (the claim may already be deleted by its set), whether
// claim name went Lost and whether its spec.podName was cleared.
func claimLostCleared(c *suite.Case, name string) (lost, cleared bool) {
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "CNClaim", Name: name}) {
		for _, f := range ch.Fields {
			switch {
			case f.Path == "status.phase" && f.New == string(mov1.CNClaimPhaseLost):
				lost = true
			case f.Path == "spec.podName" && (f.New == "<absent>" || f.New == ""):
				cleared = true
			}
		}
	}
	return lost, cleared
}

// claimClearedAfter is the wall time from since to the change that cleared claim name's spec.podName, as the
// event stream saw it.
func claimClearedAfter(c *suite.Case, name string, since time.Time) time.Duration {
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "CNClaim", Name: name}) {
		for _, f := range ch.Fields {
			if f.Path == "spec.podName" && (f.New == "<absent>" || f.New == "") {
				return ch.Time.Sub(since).Round(time.Millisecond)
			}
		}
	}
	return 0
}

// claimChurn stands for clients leaving the store uuid of namespace ns one by one: from n sessions down, one
// fewer every millisecond, until stop is called (or one is left); stop sets them to 0, so the store's drain
// ends at once. It drives the fake's session count only: nothing waits on it.
func claimChurn(ns, uuid string, n int) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(finished)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := n - 1; i > 0; i-- {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			_ = haKeeper.SetSessions(ns, uuid, i)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
			_ = haKeeper.SetSessions(ns, uuid, 0)
		})
	}
}
