package hakeeperfake

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	hk "github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

// clock is a settable clock for the drain model.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestRegistry() (*Registry, *clock) {
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return New(Options{DrainTick: time.Second, Now: c.Now}), c
}

func TestInstanceCalls(t *testing.T) {
	r, _ := newTestRegistry()
	ctx := context.Background()
	if _, err := r.Instance(ctx, "ns", "mo"); !errors.Is(err, hk.ErrNoInstance) {
		t.Fatalf("no instance before EnsureInstance (and no client): %v", err)
	}
	in := r.EnsureInstance("ns", "mo")
	got, err := r.Instance(ctx, "ns", "mo")
	if err != nil || got != hk.Client(in) || in.Discovery() != "ns/mo" || !r.HasInstance("ns", "mo") {
		t.Fatalf("Instance after EnsureInstance: %v %v", got, err)
	}
	if _, err := in.GetCNState(ctx, "u1"); !errors.Is(err, hk.ErrStoreNotExist) {
		t.Errorf("unknown store: %v", err)
	}
	if !r.Register("ns", "mo", "pod-1", "u1") || !r.Register("ns", "mo", "pod-1", "u1") {
		t.Fatal("register")
	}
	if err := in.PatchCNStore(ctx, "u1", hk.WorkStateWorking, []hk.Label{{Key: "b", Values: []string{"2"}}, {Key: "a"}}); err != nil {
		t.Fatal(err)
	}
	st, err := in.GetCNState(ctx, "u1")
	if err != nil || st.WorkState != hk.WorkStateWorking || len(st.Labels) != 2 || st.Labels[0].Key != "a" || st.PodName != "pod-1" {
		t.Errorf("state %+v %v", st, err)
	}
	if err := in.PatchCNStore(ctx, "u1", hk.WorkStateWorking, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := in.GetCNState(ctx, "u1"); len(st.Labels) != 2 {
		t.Errorf("PatchCNStore with empty labels must keep them: %+v", st)
	}
	if err := in.UpdateCNLabel(ctx, "u1", nil); err != nil {
		t.Fatal(err)
	}
	if err := in.UpdateCNWorkState(ctx, "u1", hk.WorkStateUnknown); err != nil {
		t.Fatal(err)
	}
	d, err := in.GetClusterDetails(ctx)
	if err != nil || len(d.CNStores) != 1 || d.CNStores[0].Labels != nil || d.CNStores[0].WorkState != hk.WorkStateUnknown {
		t.Errorf("details %+v %v", d, err)
	}
	if err := in.DeleteCNStore(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if err := in.DeleteCNStore(ctx, "u1"); !errors.Is(err, hk.ErrStoreNotExist) {
		t.Errorf("second delete: %v", err)
	}
	calls := r.Calls("ns")
	for op, n := range map[string]int{OpInstance: 1, OpRegister: 2, OpPatchCNStore: 2, OpGetCNState: 3,
		OpUpdateCNLabel: 1, OpUpdateCNWorkState: 1, OpGetClusterDetails: 1, OpDeleteCNStore: 2} {
		if calls[op] != n {
			t.Errorf("calls[%s] = %d, want %d (all: %v)", op, calls[op], n, calls)
		}
	}
	log := r.Log("ns")
	last := log[len(log)-1]
	if last.Op != OpDeleteCNStore || last.UUID != "u1" || last.Err == "" || last.LogSet != "mo" {
		t.Errorf("last log entry %+v", last)
	}
	if len(r.Log("other")) != 0 {
		t.Error("log is per namespace")
	}
}

func TestDrainModel(t *testing.T) {
	r, clk := newTestRegistry()
	ctx := context.Background()
	in := r.EnsureInstance("ns", "mo")
	r.Register("ns", "mo", "p", "u")
	if err := r.SetSessions("ns", "u", 3); err != nil {
		t.Fatal(err)
	}
	if err := r.SetSessions("ns", "nope", 3); !errors.Is(err, hk.ErrStoreNotExist) {
		t.Errorf("unknown store: %v", err)
	}
	clk.Add(10 * time.Second)
	if n, _ := r.Sessions("ns", "u"); n != 3 {
		t.Errorf("a Working store keeps its sessions: %d", n)
	}
	if err := in.PatchCNStore(ctx, "u", hk.WorkStateDraining, nil); err != nil {
		t.Fatal(err)
	}
	clk.Add(1500 * time.Millisecond)
	if n, _ := r.Sessions("ns", "u"); n != 2 {
		t.Errorf("after 1.5 ticks: %d sessions, want 2", n)
	}
	if err := in.PatchCNStore(ctx, "u", hk.WorkStateDraining, nil); err != nil { // repeating Draining does not restart
		t.Fatal(err)
	}
	clk.Add(500 * time.Millisecond)
	if n, _ := r.Sessions("ns", "u"); n != 1 {
		t.Errorf("after 2 ticks: %d sessions, want 1", n)
	}
	clk.Add(time.Hour)
	st, _ := in.GetCNState(ctx, "u")
	if st.Sessions != 0 || st.WorkState != hk.WorkStateDrained {
		t.Errorf("drained: %+v", st)
	}
	if err := in.PatchCNStore(ctx, "u", hk.WorkStateWorking, nil); err != nil {
		t.Fatal(err)
	}
	_ = r.SetSessions("ns", "u", 5)
	clk.Add(time.Hour)
	if st, _ := r.Store("ns", "u"); st.Sessions != 5 || st.WorkState != hk.WorkStateWorking {
		t.Errorf("working again: %+v", st)
	}
	if st, ok := r.PodStore("ns", "p"); !ok || st.UUID != "u" {
		t.Errorf("PodStore %+v %v", st, ok)
	}
}

func TestFaults(t *testing.T) {
	r, _ := newTestRegistry()
	ctx := context.Background()
	in := r.EnsureInstance("ns", "mo")
	r.Register("ns", "mo", "p", "u")
	boom := errors.New("boom")
	r.FailNext("ns", OpGetCNState, boom)
	r.FailNext("ns", OpGetCNState, boom)
	for i := range 2 {
		if _, err := in.GetCNState(ctx, "u"); !errors.Is(err, boom) {
			t.Errorf("failure %d: %v", i, err)
		}
	}
	if _, err := in.GetCNState(ctx, "u"); err != nil {
		t.Errorf("FailNext is used up: %v", err)
	}
	r.FailAlways("ns", OpPatchCNStore, boom)
	for range 3 {
		if err := in.PatchCNStore(ctx, "u", hk.WorkStateWorking, nil); !errors.Is(err, boom) {
			t.Errorf("FailAlways: %v", err)
		}
	}
	r.FailAlways("ns", OpPatchCNStore, nil)
	if err := in.PatchCNStore(ctx, "u", hk.WorkStateWorking, nil); err != nil {
		t.Errorf("FailAlways off: %v", err)
	}

	r.SetLatency("ns", OpGetClusterDetails, 50*time.Millisecond)
	start := time.Now()
	if _, err := in.GetClusterDetails(ctx); err != nil || time.Since(start) < 50*time.Millisecond {
		t.Errorf("latency: %v after %v", err, time.Since(start))
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	if _, err := in.GetClusterDetails(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("latency honours the caller's context: %v", err)
	}
	r.SetLatency("ns", OpGetClusterDetails, 0)

	r.FreezeCache("ns", true)
	r.Register("ns", "mo", "p2", "u2")
	if d, _ := in.GetClusterDetails(ctx); len(d.CNStores) != 1 {
		t.Errorf("frozen cache shows %d stores, want the 1 of the snapshot", len(d.CNStores))
	}
	if _, err := in.GetCNState(ctx, "u2"); err != nil {
		t.Errorf("GetCNState sees live stores while frozen: %v", err)
	}
	later := r.EnsureInstance("ns", "later")
	r.Register("ns", "later", "p3", "u3")
	if d, _ := later.GetClusterDetails(ctx); len(d.CNStores) != 0 {
		t.Errorf("an instance created while frozen is frozen empty: %+v", d)
	}
	r.FreezeCache("ns", false)
	if d, _ := in.GetClusterDetails(ctx); len(d.CNStores) != 2 {
		t.Errorf("unfrozen: %d stores", len(d.CNStores))
	}

	r.DropRegistrations("ns", true)
	if r.Register("ns", "mo", "p4", "u4") {
		t.Error("registration must be dropped")
	}
	r.DropRegistrations("ns", false)
	r.FailNext("ns", OpRegister, boom)
	if r.Register("ns", "mo", "p4", "u4") {
		t.Error("FailNext(OpRegister) drops one registration")
	}
	if !r.Register("ns", "mo", "p4", "u4") {
		t.Error("registration after the faults")
	}
	var dropped int
	for _, c := range r.Log("ns") {
		if c.Op == OpRegister && c.Result == "dropped" {
			dropped++
		}
	}
	if dropped != 2 || r.Calls("ns")[OpFault] < 8 {
		t.Errorf("dropped=%d faults=%d", dropped, r.Calls("ns")[OpFault])
	}
}

// TestUnavailable checks the namespace-wide outage: every operator call fails with ErrUnavailable and
// changes nothing, registrations are dropped, a queued FailNext waits for the end of it, other namespaces
// answer, and off restores every call.
func TestUnavailable(t *testing.T) {
	r, _ := newTestRegistry()
	ctx := context.Background()
	in := r.EnsureInstance("ns", "mo")
	other := r.EnsureInstance("other", "mo")
	r.Register("ns", "mo", "p", "u")
	r.Register("other", "mo", "p", "v")
	boom := errors.New("boom")
	r.FailNext("ns", OpGetCNState, boom)

	r.Unavailable("ns", true)
	// In this order, so that the store is deleted last once the calls go through again.
	calls := []struct {
		op   string
		call func() error
	}{
		{OpGetClusterDetails, func() error { _, err := in.GetClusterDetails(ctx); return err }},
		{OpPatchCNStore, func() error { return in.PatchCNStore(ctx, "u", hk.WorkStateDraining, nil) }},
		{OpUpdateCNLabel, func() error { return in.UpdateCNLabel(ctx, "u", []hk.Label{{Key: "k", Values: []string{"v"}}}) }},
		{OpUpdateCNWorkState, func() error { return in.UpdateCNWorkState(ctx, "u", hk.WorkStateDraining) }},
		{OpGetCNState, func() error { _, err := in.GetCNState(ctx, "u"); return err }},
		{OpDeleteCNStore, func() error { return in.DeleteCNStore(ctx, "u") }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s while unavailable: %v, want ErrUnavailable", c.op, err)
		}
	}
	if st, ok := r.Store("ns", "u"); !ok || st.WorkState != hk.WorkStateWorking || st.Labels != nil {
		t.Errorf("calls refused as unavailable changed the store: %+v (present %v)", st, ok)
	}
	if r.Register("ns", "mo", "p2", "u2") {
		t.Error("a registration got in while HAKeeper was unavailable")
	}
	if _, err := other.GetCNState(ctx, "v"); err != nil {
		t.Errorf("another namespace is unavailable too: %v", err)
	}

	r.Unavailable("ns", false)
	if _, err := in.GetCNState(ctx, "u"); !errors.Is(err, boom) {
		t.Errorf("the FailNext queued before the outage: %v, want it used after", err)
	}
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Errorf("%s after the outage: %v", c.op, err)
		}
	}
	if !r.Register("ns", "mo", "p2", "u2") {
		t.Error("registration after the outage")
	}
}

func TestConcurrentUse(t *testing.T) {
	r := New(Options{DrainTick: time.Microsecond})
	ctx := context.Background()
	in := r.EnsureInstance("ns", "mo")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := string(rune('a' + i))
			r.Register("ns", "mo", "p"+u, u)
			_ = r.SetSessions("ns", u, 100)
			for range 50 {
				_ = in.PatchCNStore(ctx, u, hk.WorkStateDraining, nil)
				_, _ = in.GetClusterDetails(ctx)
				_, _ = r.Sessions("ns", u)
				_ = r.Calls("ns")
			}
		}()
	}
	wg.Wait()
	if len(r.Stores("ns")) != 8 {
		t.Errorf("stores %d", len(r.Stores("ns")))
	}
}

// --- migrator decisions

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pod(name, phase string, age int, claimedBy string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
		CreationTimestamp: metav1.NewTime(base.Add(time.Duration(age) * time.Second)),
		Labels:            map[string]string{LabelComponent: ComponentCN, LabelPoolName: "pool", LabelPhase: phase}}}
	if claimedBy != "" {
		p.Labels[LabelClaimedBy] = claimedBy
	}
	return p
}

func claim(name, podName string) mov1.CNClaim {
	return mov1.CNClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: mov1.CNClaimSpec{PodName: podName, PoolName: "pool"}}
}

func TestMigrationTarget(t *testing.T) {
	other := pod("other-pool", "Idle", 0, "")
	other.Labels[LabelPoolName] = "x"
	pods := []corev1.Pod{
		pod("p1", "Bound", 1, "b"), // b's pod: the source
		pod("p2", "Bound", 2, "a"), // a's pod
		pod("p3", "Idle", 3, ""),
		pod("p4", "Idle", 4, ""),
		pod("p5", "Draining", 0, ""),
		pod("p6", "Terminating", 0, ""),
		other,
	}
	a, b := claim("a", "p2"), claim("b", "p1")
	claims := []mov1.CNClaim{a, b}

	got, err := MigrationTarget(&b, pods, claims, true)
	if err != nil || got != "p2" {
		t.Errorf("live: target %q %v, want p2 (another claim's pod: the double bind)", got, err)
	}
	got, err = MigrationTarget(&b, pods, claims, false)
	if err != nil || got != "p3" {
		t.Errorf("fixed: target %q %v, want p3 (oldest unreferenced Idle pod)", got, err)
	}

	// p3 was just given to c by the migrator (spec.podName set, still labelled Idle): fixed skips it.
	c := claim("c", "p3")
	got, err = MigrationTarget(&b, pods, append(claims, c), false)
	if err != nil || got != "p4" {
		t.Errorf("fixed with p3 referenced: %q %v, want p4", got, err)
	}
	// A claim being deleted or Lost references nothing.
	c.Status.Phase = mov1.CNClaimPhaseLost
	if got, _ := MigrationTarget(&b, pods, append(claims, c), false); got != "p3" {
		t.Errorf("a Lost claim holds no pod: %q", got)
	}
	// No unreferenced Idle pod: fixed refuses, live still doubles up.
	few := pods[:2]
	if _, err := MigrationTarget(&b, few, claims, false); !errors.Is(err, ErrNoTarget) {
		t.Errorf("fixed without a free pod: %v", err)
	}
	if got, _ := MigrationTarget(&b, few, claims, true); got != "p2" {
		t.Errorf("live without a free pod: %q", got)
	}
	// Live with nothing used by another claim: an Idle pod, oldest first.
	solo := []corev1.Pod{pod("p1", "Bound", 1, "b"), pod("p4", "Idle", 4, ""), pod("p3", "Idle", 3, "")}
	if got, _ := MigrationTarget(&b, solo, []mov1.CNClaim{b}, true); got != "p3" {
		t.Errorf("live, nothing shared: %q", got)
	}

	unbound := claim("u", "")
	if _, err := MigrationTarget(&unbound, pods, claims, true); !errors.Is(err, ErrNotBound) {
		t.Errorf("unbound: %v", err)
	}
	moving := claim("m", "p1")
	moving.Spec.SourcePod = &mov1.CNClaimSourcePod{PodName: "p0"}
	if _, err := MigrationTarget(&moving, pods, claims, true); !errors.Is(err, ErrMigrating) {
		t.Errorf("migrating: %v", err)
	}
	// The pool comes from the current pod when spec.poolName is empty.
	b.Spec.PoolName = ""
	if got, _ := MigrationTarget(&b, pods, claims, false); got != "p3" {
		t.Errorf("pool from the pod: %q", got)
	}
}

// TestAStoreRegisteredAgainExpiresWithItsProcess: a store the operator deleted and a still-running process
// registered again is dropped once the pod stops (expire), as HAKeeper drops a store whose heartbeats stop;
// a store registered once stays until the operator deletes it, so an operator that never deletes one is
// still seen leaving it behind.
func TestAStoreRegisteredAgainExpiresWithItsProcess(t *testing.T) {
	ctx := context.Background()
	r := New(Options{})
	if !r.Register("ns", "mo", "p-0", "u0") || !r.Register("ns", "mo", "p-1", "u1") {
		t.Fatal("registration dropped")
	}
	in := r.EnsureInstance("ns", "mo")
	if err := in.DeleteCNStore(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	r.Register("ns", "mo", "p-1", "u1") // the process, not yet stopped, heartbeats the store back
	r.expire("ns", "p-0")
	r.expire("ns", "p-1")
	if _, ok := r.PodStore("ns", "p-1"); ok {
		t.Error("the store registered again after its deletion outlived its stopped process")
	}
	if _, ok := r.PodStore("ns", "p-0"); !ok {
		t.Error("a store registered once was expired: only the operator's DeleteCNStore may remove it")
	}
	if n := r.Calls("ns")[OpExpire]; n != 1 {
		t.Errorf("%d Expire calls logged, want 1", n)
	}
}
