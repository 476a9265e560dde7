package pooler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ensembletest/ensemble/fakes/pooler"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
)

var key = topo.ShardKey{Database: "db", TableGroup: "tg", Shard: "0"}

func identity(component string) map[string]string {
	return map[string]string{
		"multigres.com/cluster": "c", pooler.LabelDatabase: key.Database, pooler.LabelTableGroup: key.TableGroup,
		pooler.LabelShard: key.Shard, pooler.LabelCell: "z1", pooler.LabelComponent: component,
	}
}

func poolPodName(i int) string { return fmt.Sprintf("s0-pool-main-z1-%d", i) }

func createPoolPod(g Gomega, ns string, i int) {
	l := identity(pooler.ComponentShardPool)
	l[pooler.LabelPool] = "main"
	g.Expect(k8s.Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: poolPodName(i), Labels: l},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "pooler", Image: "example.com/multipooler"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "PoolerDataReady"}},
		},
	})).To(Succeed())
}

func createMultiorch(g Gomega, ns string) {
	g.Expect(k8s.Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s0-multiorch-z1", Labels: identity(pooler.ComponentMultiorch)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "multiorch", Image: "example.com/multiorch"}}},
	})).To(Succeed())
}

// roles returns hostname -> role of the shard's poolers as the operator reads them.
func roles(g Gomega, ns string) map[string]string {
	ps, err := store.Poolers(context.Background(), ns, key)
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string]string{}
	for _, p := range ps {
		out[p.Hostname] = p.Role
	}
	return out
}

func ops(ns string) []string {
	var out []string
	for _, e := range store.Log(ns) {
		out = append(out, e.Op+" "+e.Pooler)
	}
	return out
}

func TestHoldQueuesRegistrationUntilRelease(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	store.Hold(ns)
	createPoolPod(g, ns, 0)
	createPoolPod(g, ns, 1)

	g.Eventually(func() []string { return store.Queued(ns) }).Should(Equal([]string{
		pooler.PoolerNamePrefix + poolPodName(0), pooler.PoolerNamePrefix + poolPodName(1)}))
	g.Consistently(func(g Gomega) { g.Expect(roles(g, ns)).To(BeEmpty()) }).
		WithTimeout(200 * time.Millisecond).Should(Succeed())

	store.Release(ns)
	// Present as soon as Release returns.
	g.Expect(roles(g, ns)).To(Equal(map[string]string{poolPodName(0): "", poolPodName(1): ""}))
	g.Expect(store.Queued(ns)).To(BeEmpty())
	ps, err := store.Poolers(context.Background(), ns, key)
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range ps {
		g.Expect(p.Lifecycle).To(Equal(topo.LifecycleServing))
		g.Expect(p.Cell).To(Equal("z1"))
		g.Expect(p.Key).To(Equal(key))
		g.Expect(p.Initialized && p.AcceptingConnections && p.CohortEligible).To(BeTrue())
		g.Expect(p.InCommittedCohort).To(BeFalse()) // no primary yet
	}
	g.Expect(ops(ns)).To(ContainElements("hold ", "queue "+pooler.PoolerNamePrefix+poolPodName(0),
		"release ", "register "+pooler.PoolerNamePrefix+poolPodName(0), "register "+pooler.PoolerNamePrefix+poolPodName(1)))
}

func TestElectionAfterMultiorchReady(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	createPoolPod(g, ns, 1) // created first, but ordinal 1
	createPoolPod(g, ns, 0)
	g.Eventually(func(g Gomega) { g.Expect(roles(g, ns)).To(HaveLen(2)) }).Should(Succeed())
	// No multiorch: no election.
	g.Consistently(func(g Gomega) {
		g.Expect(roles(g, ns)).To(Equal(map[string]string{poolPodName(0): "", poolPodName(1): ""}))
	}).WithTimeout(200 * time.Millisecond).Should(Succeed())

	createMultiorch(g, ns)
	g.Eventually(func(g Gomega) {
		g.Expect(roles(g, ns)).To(Equal(map[string]string{poolPodName(0): topo.RolePrimary, poolPodName(1): topo.RoleReplica}))
	}).Should(Succeed())
	ps, _ := store.Poolers(context.Background(), ns, key)
	for _, p := range ps {
		g.Expect(p.InCommittedCohort).To(BeTrue())
	}

	// A late pooler joins as replica.
	createPoolPod(g, ns, 2)
	g.Eventually(func(g Gomega) {
		g.Expect(roles(g, ns)).To(HaveKeyWithValue(poolPodName(2), topo.RoleReplica))
	}).Should(Succeed())
	g.Expect(roles(g, ns)).To(HaveKeyWithValue(poolPodName(0), topo.RolePrimary))
	elections := 0
	for _, e := range store.Log(ns) {
		if e.Op == "elect" {
			elections++
		}
	}
	g.Expect(elections).To(Equal(1))

	// The primary's pod goes: its pooler stays (not accepting connections) until pruned; pruning it lets
	// multiorch elect the next lowest ordinal.
	primary := pooler.PoolerNamePrefix + poolPodName(0)
	g.Expect(k8s.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: poolPodName(0)}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		ps, err := store.Poolers(context.Background(), ns, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ps).To(ContainElement(SatisfyAll(
			HaveField("Name", primary), HaveField("Role", topo.RolePrimary), HaveField("AcceptingConnections", false))))
	}).Should(Succeed())
	g.Expect(store.SetLifecycle(context.Background(), ns, primary, topo.LifecycleShutdown)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(roles(g, ns)).To(HaveKeyWithValue(poolPodName(1), topo.RolePrimary))
	}).Should(Succeed())
}

func TestFaults(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	g.Expect(store.RegisterCell(ctx, ns, "z1")).To(Succeed())
	g.Expect(store.RegisterCell(ctx, ns, "z1")).To(Succeed())
	g.Expect(store.RegisterDatabase(ctx, ns, "db")).To(Succeed())
	g.Expect(store.Cells(ns)).To(Equal([]string{"z1"}))
	g.Expect(store.Databases(ns)).To(Equal([]string{"db"}))

	store.FreezeElections(ns, true)
	createMultiorch(g, ns)
	createPoolPod(g, ns, 0)
	g.Eventually(func(g Gomega) { g.Expect(roles(g, ns)).To(HaveLen(1)) }).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(roles(g, ns)).To(Equal(map[string]string{poolPodName(0): ""}))
	}).WithTimeout(300 * time.Millisecond).Should(Succeed())
	store.FreezeElections(ns, false)
	g.Eventually(func(g Gomega) {
		g.Expect(roles(g, ns)).To(Equal(map[string]string{poolPodName(0): topo.RolePrimary}))
	}).Should(Succeed())

	name := pooler.PoolerNamePrefix + poolPodName(0)
	store.Misreport(ns, name, topo.RoleReplica)
	g.Expect(roles(g, ns)).To(Equal(map[string]string{poolPodName(0): topo.RoleReplica}))
	g.Expect(store.Snapshot(ns)).To(ConsistOf(HaveField("Role", topo.RolePrimary)))
	store.ClearMisreport(ns, name)
	g.Expect(roles(g, ns)).To(Equal(map[string]string{poolPodName(0): topo.RolePrimary}))

	store.Unavailable(ns, true)
	_, err := store.Poolers(ctx, ns, key)
	g.Expect(errors.Is(err, topo.ErrUnavailable)).To(BeTrue())
	g.Expect(errors.Is(store.SetLifecycle(ctx, ns, name, topo.LifecycleShutdown), topo.ErrUnavailable)).To(BeTrue())
	store.Unavailable(ns, false)

	g.Expect(errors.Is(store.SetLifecycle(ctx, ns, "nope", topo.LifecycleShutdown), pooler.ErrUnknownPooler)).To(BeTrue())
	g.Expect(store.SetLifecycle(ctx, ns, name, "BOGUS")).To(HaveOccurred())

	var changed []bool
	for _, e := range store.Log(ns) {
		if e.Op == "register-cell" {
			changed = append(changed, e.Changed)
		}
	}
	g.Expect(changed).To(Equal([]bool{true, false}))
}

// TestLatency checks SetLatency on a Store of its own (no simulator needed): every operator call of the
// namespace waits at least the latency, a call whose context ends during the wait fails with the context's
// error and changes nothing, other namespaces are not slowed, and 0 ends it.
func TestLatency(t *testing.T) {
	g := NewWithT(t)
	st := pooler.New(pooler.Options{})
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()

	st.SetLatency("slow", time.Hour)
	g.Expect(st.RegisterCell(done, "slow", "z1")).To(MatchError(context.Canceled))
	g.Expect(st.RegisterDatabase(done, "slow", "db")).To(MatchError(context.Canceled))
	_, err := st.Poolers(done, "slow", key)
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(st.SetLifecycle(done, "slow", "p", topo.LifecycleShutdown)).To(MatchError(context.Canceled))
	g.Expect(st.Cells("slow")).To(BeEmpty(), "a call cut short during its latency changed the topology")
	g.Expect(st.RegisterCell(done, "other", "z1")).To(Succeed(), "another namespace was slowed")

	const d = 50 * time.Millisecond
	st.SetLatency("slow", d)
	for name, call := range map[string]func() error{
		"RegisterCell":     func() error { return st.RegisterCell(ctx, "slow", "z1") },
		"RegisterDatabase": func() error { return st.RegisterDatabase(ctx, "slow", "db") },
		"Poolers":          func() error { _, err := st.Poolers(ctx, "slow", key); return err },
		"SetLifecycle": func() error {
			return st.SetLifecycle(ctx, "slow", "nope", topo.LifecycleShutdown)
		},
	} {
		start := time.Now()
		err := call()
		g.Expect(time.Since(start)).To(BeNumerically(">=", d), "%s answered before the latency", name)
		if name == "SetLifecycle" {
			g.Expect(errors.Is(err, pooler.ErrUnknownPooler)).To(BeTrue(), "%s: %v", name, err)
		} else {
			g.Expect(err).NotTo(HaveOccurred(), name)
		}
	}
	st.Unavailable("slow", true)
	g.Expect(errors.Is(st.RegisterCell(ctx, "slow", "z2"), topo.ErrUnavailable)).To(BeTrue(), "Unavailable applies after the latency too")
	st.Unavailable("slow", false)

	st.SetLatency("slow", 0)
	g.Expect(st.RegisterCell(done, "slow", "z1")).To(Succeed(), "latency 0 still waits")
	var switches []string
	for _, e := range st.Log("slow") {
		if e.Op == "latency" {
			switches = append(switches, e.Detail)
		}
	}
	g.Expect(switches).To(Equal([]string{"1h0m0s", "50ms", "0s"}))
}
