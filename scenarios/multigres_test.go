package scenarios

import (
	"fmt"
	"sort"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fakes/dataplane"
	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// healthyTimeout bounds how long a small cluster may take to become Healthy (it takes about a second).
const healthyTimeout = 30 * time.Second

// shardOf reads the case's shard.
func shardOf(c *suite.Case, name string) *mgv1.Shard {
	GinkgoHelper()
	sh := &mgv1.Shard{}
	Expect(c.Get(name, sh)).To(Succeed())
	return sh
}

// podReady reports whether the named pod of the case exists and its Ready condition is True.
func podReady(c *suite.Case, name string) bool {
	cond, ok := podCondition(c, name, corev1.PodReady)
	return ok && cond.Status == corev1.ConditionTrue
}

// podCondition returns the named pod's condition of type t, and false when the pod or the condition is
// missing.
func podCondition(c *suite.Case, name string, t corev1.PodConditionType) (corev1.PodCondition, bool) {
	p := &corev1.Pod{}
	if err := c.Get(name, p); err != nil {
		return corev1.PodCondition{}, false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == t {
			return cond, true
		}
	}
	return corev1.PodCondition{}, false
}

// roles returns the pods holding role in podRoles, sorted.
func roles(podRoles map[string]string, role string) []string {
	var out []string
	for p, r := range podRoles {
		if r == role {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// setPoolReplicas sets replicasPerCell of pool in the first shard of the case's cluster (one write, retried
// on conflict) and returns without waiting for the operator.
func setPoolReplicas(c *suite.Case, cluster, pool string, replicas int32) {
	GinkgoHelper()
	mc := &mgv1.MultigresCluster{}
	Expect(c.Update(cluster, mc, func() {
		sh := &mc.Spec.Databases[0].TableGroups[0].Shards[0]
		p := sh.Pools[pool]
		p.ReplicasPerCell = replicas
		sh.Pools[pool] = p
	})).To(Succeed())
}

// ownedPoolPods returns the names of the case's pods labelled component=shard-pool whose controller owner
// reference is the named shard, sorted; pods being deleted are included.
func ownedPoolPods(g Gomega, c *suite.Case, shard string) []string {
	sh := &mgv1.Shard{}
	g.Expect(c.Get(shard, sh)).To(Succeed())
	pods := &corev1.PodList{}
	g.Expect(c.List(pods, client.MatchingLabels{multigres.LabelComponent: multigres.ComponentShardPool})).To(Succeed())
	var out []string
	for i := range pods.Items {
		if ref := metav1.GetControllerOf(&pods.Items[i]); ref != nil && ref.UID == sh.UID {
			out = append(out, pods.Items[i].Name)
		}
	}
	sort.Strings(out)
	return out
}

// allowElectionOrder declares that the shards selected may end with another pod PRIMARY under a
// perturbation: the multiorch stand-in elects by the order the pods come up, which a held or restarted view
// of a pod changes.
func allowElectionOrder(c *suite.Case, shards suite.Objects) {
	c.AllowDifference(shards, "status.podRoles", "the multiorch stand-in makes the lowest-ordinal pooler serving at "+
		"election time PRIMARY: which pod that is depends on the order the pods come up")
}

// bringUpHealthy creates the spec's cluster in the case and waits until its shard is Healthy; it returns
// how long that took.
func bringUpHealthy(c *suite.Case, spec fixtures.MultigresSpec) time.Duration {
	GinkgoHelper()
	cluster, err := fixtures.Multigres(spec)
	Expect(err).NotTo(HaveOccurred())
	name := spec.Names().Shard
	allowElectionOrder(c, suite.Objects{Kind: "Shard", Name: name})
	start := time.Now()
	Expect(c.Create(cluster)).To(Succeed())
	Eventually(func(g Gomega) {
		sh := &mgv1.Shard{}
		g.Expect(c.Get(name, sh)).To(Succeed())
		g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard %s: %s", name, sh.Status.Message)
	}).WithTimeout(healthyTimeout).Should(Succeed())
	return time.Since(start)
}

var _ = Describe("multigres", Label("multigres"), func() {
	It("a cluster of one shard and a pool of 2 becomes Healthy with one PRIMARY and both pool pods Ready", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		took := bringUpHealthy(c, spec)
		AddReportEntry("cluster Healthy after", took.Round(time.Millisecond).String())

		sh := shardOf(c, spec.Names().Shard)
		pods := spec.PoolPods("main", 2)
		Expect(roles(sh.Status.PodRoles, "PRIMARY")).To(HaveLen(1), "podRoles = %v", sh.Status.PodRoles)
		Expect(sets.List(sets.KeySet(sh.Status.PodRoles))).To(Equal(pods), "podRoles must name exactly the pool pods")
		Expect(sh.Status.PoolsReady).To(BeTrue(), "a Healthy shard reports poolsReady=false (status: %+v)", sh.Status)
		Expect(sh.Status.OrchReady).To(BeTrue(), "a Healthy shard reports orchReady=false (status: %+v)", sh.Status)
		for _, p := range pods {
			Expect(podReady(c, p)).To(BeTrue(), "pool pod %s is not Ready", p)
		}
	})

	It("a healthy shard is quiescent for 1 s, its fields owned by the declared field managers", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{}
		bringUpHealthy(c, spec)

		took := c.RequireQuiescent(time.Second, 20*time.Second)
		AddReportEntry("healthy shard proven quiescent (1 s window) in", took.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)

		sh := shardOf(c, spec.Names().Shard)
		Expect(sh).To(suite.HaveFieldManagersWithin(multigres.FieldOwners()...))
		own, err := suite.OwnershipOf(sh)
		Expect(err).NotTo(HaveOccurred())
		Expect(own.Owners("status.podRoles")).To(Equal([]string{multigres.FieldOwnerResourceHandler}), "podRoles must have one field owner")
		for _, p := range spec.PoolPods("main", 2) {
			pod := &corev1.Pod{}
			Expect(c.Get(p, pod)).To(Succeed())
			Expect(pod).To(suite.HaveFieldManagersWithin(append(multigres.FieldOwners(), dataplane.DefaultFieldOwner)...))
		}
	})

	It("a pool scaled 2 -> 3 while pooler registrations are held: the late pooler's role lands in podRoles", latePoolerRoleSpec)

	It("a pool whose StorageClass is missing starts no pod and its shard is Degraded; once the class exists the shard comes up Healthy", missingPoolClassSpec)

	It("a shard left unconverged past the lower clamp of its backoff asks for longer polls (takes the clamp plus its jitter, 1.8 s on the spec's own instance: the backoff only grows after it)", backoffGrowthSpec)

	It("pins MG-CONDITION-MAP-ORDER: the StorageClassValid message over a window with two missing classes", Label("pin"), func() {
		c := s.NewCase(GinkgoT())
		c.OptOut(suite.HotLoop, "MG-CONDITION-MAP-ORDER is live: the StorageClassValid message flaps, each flap a write the next pass answers")
		c.OptOut(suite.Convergence, "MG-CONDITION-MAP-ORDER is live: the StorageClassValid message never settles")
		msgs, passes, _ := storageClassMessages(c, fixtures.MultigresSpec{Pools: map[string]fixtures.Pool{
			"alpha": {ReplicasPerCell: 1, StorageClass: "missing-alpha"},
			"beta":  {ReplicasPerCell: 1, StorageClass: "missing-beta"},
		}})
		c.KnownDefect(multigres.DefectConditionMapOrder, func() error {
			if len(msgs) > 1 {
				return fmt.Errorf("StorageClassValid message took %d values over %d passes: %q", len(msgs), passes, msgs)
			}
			return nil
		})
	})

	It("StorageClassValid has one writer: with the backup and the pool class missing its message is stable", func() {
		c := s.NewCase(GinkgoT())
		spec := fixtures.MultigresSpec{BackupStorageClass: "missing-backup",
			Pools: map[string]fixtures.Pool{"main": {ReplicasPerCell: 1, StorageClass: "missing-pool"}}}
		msgs, passes, first := storageClassMessages(c, spec)
		Expect(msgs).To(HaveLen(1), "StorageClassValid took %d messages over %d passes: two writers fight over it", len(msgs), passes)
		Expect(msgs[0]).To(And(ContainSubstring("missing-backup"), ContainSubstring("missing-pool")), "one verdict names every missing class")
		By("a condition whose status did not change keeps its lastTransitionTime, however many passes rewrite it")
		last := shardOf(c, spec.Names().Shard)
		for _, t := range []string{mgv1.ConditionStorageClassValid, mgv1.ConditionAvailable} {
			was, is := meta.FindStatusCondition(first.Status.Conditions, t), meta.FindStatusCondition(last.Status.Conditions, t)
			Expect(was).NotTo(BeNil(), "no %s condition when StorageClassValid was first reported", t)
			Expect(is).NotTo(BeNil(), "no %s condition at the end", t)
			Expect(is.Status).To(Equal(was.Status), "%s changed status: the window was not one of an unchanged condition", t)
			Expect(is.LastTransitionTime.Time).To(BeTemporally("==", was.LastTransitionTime.Time),
				"%s stayed %s over %d passes, yet its lastTransitionTime moved", t, is.Status, passes)
		}
		By("an unchanged verdict is not sent again: the guard writes StorageClassValid once, not once a pass")
		// A pass that began before the manager's cache held the guard's first write sends the verdict again
		// (seen once under load, 48 ms after the first), so a few writes are the cache's lag; one a pass is not.
		var guard []string
		for _, w := range c.Writes(suite.WriteFilter{Kind: "Shard", Name: spec.Names().Shard}) {
			if w.FieldOwner == multigres.FieldOwnerGuard {
				guard = append(guard, w.String())
			}
		}
		Expect(len(guard)).To(BeNumerically("<", passes/4), "the guard re-sent an unchanged StorageClassValid over %d passes: %q", passes, guard)
	})
})

// missingPoolClassSpec creates a cluster whose pool names a StorageClass that does not exist yet, checks that
// the shard reports it and starts no pool pod over several passes, then creates the class and waits for the
// shard to come up Healthy.
func missingPoolClassSpec() {
	c := s.NewCase(GinkgoT())
	class := c.Namespace + "-pool"
	spec := fixtures.MultigresSpec{Pools: map[string]fixtures.Pool{"main": {ReplicasPerCell: 1, StorageClass: class}}}
	names := spec.Names()
	cluster, err := fixtures.Multigres(spec)
	Expect(err).NotTo(HaveOccurred())
	allowElectionOrder(c, suite.Objects{Kind: "Shard", Name: names.Shard})
	Expect(c.Create(cluster)).To(Succeed())
	Eventually(func() string { return storageClassValid(c, names.Shard) }).WithTimeout(healthyTimeout).
		Should(ContainSubstring(class), "the shard never reported its missing pool StorageClass")

	By("the shard starts no pool pod while its class is missing, pass after pass")
	since := time.Now()
	Eventually(func() int {
		return len(c.Passes(suite.PassFilter{Name: names.Shard, Controller: multigres.ShardControllerName, Since: since}))
	}).WithTimeout(healthyTimeout).Should(BeNumerically(">=", 3), "the shard was not reconciled again")
	Expect(ownedPoolPods(Default, c, names.Shard)).To(BeEmpty(), "pool pods started on a StorageClass that does not exist")
	Expect(shardOf(c, names.Shard).Status.Phase).To(Equal(mgv1.PhaseDegraded))

	By("creating the class: the shard comes up")
	Expect(c.Create(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "ensemble.test/none"})).To(Succeed())
	Eventually(func(g Gomega) {
		sh := &mgv1.Shard{}
		g.Expect(c.Get(names.Shard, sh)).To(Succeed())
		g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
	}).WithTimeout(healthyTimeout).Should(Succeed(), "the shard never came up once its StorageClass existed")
	Expect(ownedPoolPods(Default, c, names.Shard)).To(Equal(spec.PoolPods("main", 1)))
}

// backoffLowerClamp is the lower clamp of the unconverged-shard backoff on the backoff spec's own operator
// instance: the spec waits out the clamp plus its jitter, and the default's 5 s (6 s with the jitter) would be
// most of its run. It stays above the harness's requeue compression threshold (1 s), so the shard's polls are
// compressed as under the default clamp, and the spec still states that the backoff grows only past the clamp.
const backoffLowerClamp = 1500 * time.Millisecond

// backoffManager names the backoff spec's own multigres manager.
const backoffManager = "mg-backoff"

// backoffGrowthSpec holds a scaled shard's new pooler unregistered until the shard, unconverged all along, has
// asked for a poll later than the lower clamp plus its jitter allows, then releases it. It runs an operator
// instance of its own whose lower clamp is backoffLowerClamp, the run's options otherwise.
func backoffGrowthSpec() {
	c := s.NewCase(GinkgoT(), suite.Unadmitted())
	opts := mgOptions
	opts.UnconvergedRequeueMin = backoffLowerClamp
	multigresInstance(c, backoffManager, opts)
	spec := fixtures.MultigresSpec{}
	bringUpHealthy(c, spec)
	names := spec.Names()
	lo, hi, jitter := opts.UnconvergedRequeueMin, opts.UnconvergedRequeueMax, opts.UnconvergedJitter
	floor := time.Duration(float64(lo) * (1 + max(jitter, 0)))
	Expect(hi).To(BeNumerically(">", floor), "the spec's options leave the backoff no room to grow: upper clamp %v, lower clamp and jitter %v; give its instance an upper clamp above it", hi, floor)

	topology.Hold(c.Namespace)
	DeferCleanup(topology.Release, c.Namespace)
	scaled := time.Now()
	setPoolReplicas(c, names.Cluster, "main", 3)
	By("holding the new pooler until the shard asks for a poll past the lower clamp")
	Eventually(func() time.Duration {
		var longest time.Duration
		for _, p := range c.Passes(suite.PassFilter{Manager: backoffManager, Name: names.Shard, Controller: multigres.ShardControllerName, Since: scaled}) {
			if p.Err == nil {
				longest = max(longest, p.Asked)
			}
		}
		return longest
	}).WithTimeout(backoffPatience(floor)).Should(BeNumerically(">", floor),
		"a shard unconverged for %v never asked for a poll later than the lower clamp %v plus its jitter", backoffPatience(floor), lo)

	topology.Release(c.Namespace)
	Eventually(func(g Gomega) {
		sh := &mgv1.Shard{}
		g.Expect(c.Get(names.Shard, sh)).To(Succeed())
		g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
	}).WithTimeout(healthyTimeout).Should(Succeed(), "the shard never came up after the release")
}

// backoffPatience is how long the backoff spec waits for a poll past floor, the lower clamp plus its jitter:
// three times floor, and at least 10 s more than floor, so a loaded machine that runs the shard's next pass
// late after the floor is not taken for a backoff that stopped growing.
func backoffPatience(floor time.Duration) time.Duration {
	return max(3*floor, floor+10*time.Second)
}

// latePoolerRoleSpec scales a Healthy shard's pool from 2 to 3 pods while pooler registrations are held,
// and checks that once they are released the late pooler's role lands in podRoles and the shard is Healthy.
func latePoolerRoleSpec() {
	c := s.NewCase(GinkgoT())
	spec := fixtures.MultigresSpec{}
	created := time.Now()
	bringUpHealthy(c, spec)
	names := spec.Names()
	newPod := spec.PoolPods("main", 3)[2]

	topology.Hold(c.Namespace)
	DeferCleanup(topology.Release, c.Namespace)
	setPoolReplicas(c, names.Cluster, "main", 3)

	By("holding the registration until the shard has been stable for 1 s")
	Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(c.Get(newPod, p)).To(Succeed())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
	}).WithTimeout(healthyTimeout).Should(Succeed())
	c.RequireQuiescent(time.Second, 30*time.Second, suite.StateOnly())
	sh := shardOf(c, names.Shard)
	Expect(sh.Status.PodRoles).NotTo(HaveKey(newPod), "the held pooler's role appeared before Release: the race was not constructed")
	Expect(sh.Status.Phase).NotTo(Equal(mgv1.PhaseHealthy), "a shard with an unregistered pooler reports Healthy")
	for _, t := range []string{mgv1.ConditionAvailable, mgv1.ConditionPostureConsistent} {
		cond := meta.FindStatusCondition(sh.Status.Conditions, t)
		Expect(cond).NotTo(BeNil(), "the shard has no %s condition", t)
		Expect(cond.Status).To(Equal(metav1.ConditionFalse), "a shard whose pod %s has no pooler reports %s True", newPod, t)
	}

	By("releasing the registration")
	released := time.Now()
	topology.Release(c.Namespace)
	Eventually(func(g Gomega) {
		sh := &mgv1.Shard{}
		g.Expect(c.Get(names.Shard, sh)).To(Succeed())
		g.Expect(sh.Status.PodRoles).To(HaveKeyWithValue(newPod, "REPLICA"))
		g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy))
	}).WithTimeout(healthyTimeout).Should(Succeed(), "the late pooler's role never landed in podRoles")
	Expect(podReady(c, newPod)).To(BeTrue())
	AddReportEntry("late pooler's role landed after Release in", time.Since(released).Round(time.Millisecond).String())
	By("the late pod's PoolerDataReady turned True after the release, and its lastTransitionTime says so")
	// The condition was False since before the 1 s quiet window; timestamps are whole seconds.
	cond, ok := podCondition(c, newPod, multigres.PodConditionPoolerDataReady)
	Expect(ok).To(BeTrue(), "pod %s has no %s condition", newPod, multigres.PodConditionPoolerDataReady)
	Expect(cond.LastTransitionTime.Time).NotTo(BeTemporally("<", released.Truncate(time.Second)),
		"pod %s's %s turned %s after the release at %s, yet its lastTransitionTime is %s", newPod,
		multigres.PodConditionPoolerDataReady, cond.Status, released.Format(time.TimeOnly), cond.LastTransitionTime.Format(time.TimeOnly))

	By("each poll of the unconverged shard kept to its backoff: the time unconverged, clamped, plus at most the jitter")
	// The shard cannot have been unconverged for longer than the case has existed, so that bounds each delay
	// from above; requeue compression shortens the delays the shard waited, not the ones it asked for (Pass.Asked).
	lo, hi, jitter := mgOptions.UnconvergedRequeueMin, mgOptions.UnconvergedRequeueMax, mgOptions.UnconvergedJitter
	hi = max(hi, lo)
	polls, atFloor := 0, map[time.Duration]bool{}
	for _, p := range c.Passes(suite.PassFilter{Name: names.Shard, Controller: multigres.ShardControllerName}) {
		if p.Asked == 0 || p.Err != nil || p.End.IsZero() {
			continue
		}
		polls++
		if p.End.Sub(created) < lo {
			atFloor[p.Asked] = true // unconverged for less than the lower clamp: only the jitter varies the delay
		}
		ceiling := time.Duration(float64(min(max(p.End.Sub(created), lo), hi)) * (1 + jitter))
		Expect(p.Asked).To(And(BeNumerically(">=", lo), BeNumerically("<=", ceiling)),
			"shard pass %d, %v after the cluster was created, asked to be polled again after %v", p.N, p.End.Sub(created).Round(time.Millisecond), p.Asked)
	}
	Expect(polls).To(BeNumerically(">", 1), "the unconverged shard asked to be polled again %d times", polls)
	if jitter > 0 {
		Expect(len(atFloor)).To(BeNumerically(">", 1), "the polls of the first %v all asked for the same delay: the jitter that spreads shards' polls is missing", lo)
	}
}

// storageClassValid returns the StorageClassValid condition's message of the case's shard ("" when absent).
func storageClassValid(c *suite.Case, name string) string {
	sh := &mgv1.Shard{}
	if err := c.Get(name, sh); err != nil {
		return ""
	}
	for _, cond := range sh.Status.Conditions {
		if cond.Type == mgv1.ConditionStorageClassValid {
			return cond.Message
		}
	}
	return ""
}

// storageClassMessages creates spec's cluster (whose StorageClasses are missing), waits until its shard
// reports StorageClassValid, then for 40 more shard passes collects every message the condition took. It
// returns the distinct messages (sorted), the number of passes observed and the shard as read when the
// condition was first seen.
func storageClassMessages(c *suite.Case, spec fixtures.MultigresSpec) ([]string, int, *mgv1.Shard) {
	GinkgoHelper()
	cluster, err := fixtures.Multigres(spec)
	Expect(err).NotTo(HaveOccurred())
	Expect(c.Create(cluster)).To(Succeed())
	name := spec.Names().Shard
	Eventually(func() string { return storageClassValid(c, name) }).WithTimeout(healthyTimeout).
		ShouldNot(BeEmpty(), "the shard never reported its missing StorageClasses")
	first := shardOf(c, name)
	const passes = 40
	start := time.Now()
	msgs := sets.New(storageClassValid(c, name))
	Eventually(func() int {
		return len(c.Passes(suite.PassFilter{Name: name, Controller: multigres.ShardControllerName, Since: start}))
	}).WithTimeout(healthyTimeout).Should(BeNumerically(">=", passes), "the shard was not reconciled %d times", passes)
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Shard", Name: name, Since: start}) {
		for _, f := range ch.Fields {
			if f.Path == "status.conditions[type=StorageClassValid].message" {
				msgs.Insert(f.New)
			}
		}
	}
	return sets.List(msgs), passes, first
}
