package multigres

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
)

func TestNames(t *testing.T) {
	tg := TableGroupName("mg", "postgres", "default")
	sh := ShardName(tg, "0-inf")
	for got, want := range map[string]string{
		tg:                               "mg-postgres-default",
		sh:                               "mg-postgres-default-0-inf",
		PoolPodName(sh, "main", "z1", 2): "mg-postgres-default-0-inf-pool-main-z1-2",
		MultiorchPodName(sh, "z1"):       "mg-postgres-default-0-inf-multiorch-z1",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func testShard() *mgv1.Shard {
	return &mgv1.Shard{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Generation: 3, UID: "uid-s"},
		Spec: mgv1.ShardSpec{
			DatabaseName: "db", TableGroupName: "tg", ShardName: "0-inf",
			Pools: map[string]mgv1.PoolSpec{
				"b": {Cells: []string{"z2", "z1"}, ReplicasPerCell: 1, StorageClass: "slow"},
				"a": {Cells: []string{"z1"}, ReplicasPerCell: 2, StorageClass: "fast"},
			},
		},
	}
}

func TestDesiredPodsAndCells(t *testing.T) {
	s := testShard()
	var names []string
	for _, d := range desiredPoolPods(s) {
		names = append(names, d.Name)
	}
	want := []string{"s-pool-a-z1-0", "s-pool-a-z1-1", "s-pool-b-z1-0", "s-pool-b-z2-0"}
	if !slices.Equal(names, want) {
		t.Errorf("desired pool pods %v, want %v", names, want)
	}
	if got := orchCells(s); !slices.Equal(got, []string{"z1", "z2"}) {
		t.Errorf("orch cells default to pool cells, got %v", got)
	}
	s.Spec.Multiorch.Cells = []string{"z3"}
	if got := shardCells(s); !slices.Equal(got, []string{"z1", "z2", "z3"}) {
		t.Errorf("cells %v", got)
	}
	p := PoolPod(s, "a", "z1", 0)
	if p.Labels[LabelComponent] != ComponentShardPool || p.Labels[LabelPool] != "a" || p.Labels[LabelCell] != "z1" ||
		len(p.Spec.ReadinessGates) != 1 || p.Spec.ReadinessGates[0].ConditionType != PodConditionPoolerDataReady ||
		!ownedBy(p, s) {
		t.Errorf("pool pod %+v", p)
	}
	if o := multiorchPod(s, "z3"); o.Labels[LabelComponent] != ComponentMultiorch || o.Labels[LabelShard] != "0-inf" ||
		len(o.Spec.ReadinessGates) != 0 || !ownedBy(o, s) {
		t.Errorf("multiorch pod %+v", o)
	}
}

func TestPoolStorageClassOrder(t *testing.T) {
	pools := map[string]mgv1.PoolSpec{}
	for _, n := range []string{"a", "b", "c", "d"} {
		pools[n] = mgv1.PoolSpec{StorageClass: "class-" + n}
	}
	pools["e"] = mgv1.PoolSpec{StorageClass: "class-a"} // duplicate class counted once
	pools["f"] = mgv1.PoolSpec{}                        // default class: not checked
	want := []string{"class-a", "class-b", "class-c", "class-d"}
	for range 50 {
		if got := poolStorageClasses(pools, false); !slices.Equal(got, want) {
			t.Fatalf("fixed order: got %v, want %v", got, want)
		}
	}
	two := map[string]mgv1.PoolSpec{"x": {StorageClass: "fast"}, "y": {StorageClass: "slow"}}
	seen := map[string]bool{}
	for range 500 {
		seen[storageClassCondition(poolStorageClasses(two, true), 1).Message] = true
	}
	if len(seen) != 2 {
		t.Errorf("MG-CONDITION-MAP-ORDER live: want both orders of two missing classes, saw %v", seen)
	}
	for range 50 {
		if m := storageClassCondition(poolStorageClasses(two, false), 1).Message; m != "storage class(es) not found: fast, slow" {
			t.Fatalf("fixed message %q", m)
		}
	}
}

func TestStorageClassConditions(t *testing.T) {
	if c := storageClassCondition(nil, 4); c.Status != metav1.ConditionTrue || c.ObservedGeneration != 4 {
		t.Errorf("%+v", c)
	}
	b := backupStorageClassCondition("bk", true, 1)
	p := poolStorageClassCondition([]string{"x"}, 1)
	if b.Status != metav1.ConditionFalse || !strings.Contains(b.Message, "bk") || p.Message == b.Message {
		t.Errorf("split writers must differ: %+v %+v", b, p)
	}
	if backupStorageClassCondition("bk", false, 1).Message == poolStorageClassCondition(nil, 1).Message {
		t.Error("split writers' healthy messages must differ (that is the defect)")
	}
}

func TestGuardPayload(t *testing.T) {
	s := testShard()
	cond := storageClassCondition(nil, 1)
	cond.LastTransitionTime = metav1.Now()
	fixed, err := guardPayload(s, cond, false)
	if err != nil {
		t.Fatal(err)
	}
	st := fixed.Object["status"].(map[string]any)
	if len(st) != 1 || len(st["conditions"].([]any)) != 1 || fixed.Object["spec"] != nil {
		t.Errorf("fixed payload must hold only status.conditions: %v", fixed.Object)
	}
	zero, err := guardPayload(s, cond, true)
	if err != nil {
		t.Fatal(err)
	}
	zst := zero.Object["status"].(map[string]any)
	if zst["orchReady"] != false || zst["poolsReady"] != false {
		t.Errorf("MG-STATUS-SSA-ZERO-FIELDS live: typed literal must serialise zero bools: %v", zst)
	}
	if zero.GetName() != "s" || zero.GetNamespace() != "ns" || zero.GetKind() != "Shard" {
		t.Errorf("typed literal identity: %v", zero.Object)
	}
}

func TestSubsetEqual(t *testing.T) {
	live := map[string]any{
		"orchReady": true, "poolsReady": true,
		"conditions": []any{
			map[string]any{"type": "Available", "status": "True"},
			map[string]any{"type": "StorageClassValid", "status": "True", "message": "m"},
		},
	}
	cases := []struct {
		payload map[string]any
		want    bool
	}{
		{map[string]any{"conditions": []any{map[string]any{"type": "StorageClassValid", "status": "True", "message": "m"}}}, true},
		{map[string]any{"conditions": []any{map[string]any{"type": "StorageClassValid", "status": "True", "message": "n"}}}, false},
		{map[string]any{"conditions": []any{map[string]any{"type": "Other", "status": "True"}}}, false},
		{map[string]any{"orchReady": false, "conditions": []any{map[string]any{"type": "StorageClassValid", "status": "True", "message": "m"}}}, false},
		{map[string]any{"orchReady": true}, true},
	}
	for i, c := range cases {
		if got := subsetEqual(c.payload, live); got != c.want {
			t.Errorf("case %d: got %v want %v", i, got, c.want)
		}
	}
}

func TestUnconvergedRequeue(t *testing.T) {
	lo, hi := 5*time.Second, 60*time.Second
	for _, c := range []struct {
		elapsed time.Duration
		base    time.Duration
	}{{0, lo}, {3 * time.Second, lo}, {30 * time.Second, 30 * time.Second}, {10 * time.Minute, hi}} {
		if got := unconvergedRequeue(c.elapsed, lo, hi, 0.2, 0); got != c.base {
			t.Errorf("elapsed %v rnd 0: got %v want %v", c.elapsed, got, c.base)
		}
		for _, rnd := range []float64{0.3, 0.999999} {
			got := unconvergedRequeue(c.elapsed, lo, hi, 0.2, rnd)
			if got < c.base || got >= c.base+c.base/5 {
				t.Errorf("elapsed %v rnd %v: %v outside [%v, %v)", c.elapsed, rnd, got, c.base, c.base+c.base/5)
			}
		}
	}

	now := time.Unix(1000, 0)
	opts := DefaultOptions()
	opts.Now = func() time.Time { return now }
	opts.Rand = func() float64 { return 0.5 }
	opts = opts.withDefaults()
	var tr unconvergedTracker
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	if d := tr.delay(key, opts); d != 5500*time.Millisecond {
		t.Errorf("first unconverged pass: %v", d)
	}
	now = now.Add(20 * time.Second)
	if d := tr.delay(key, opts); d != 22*time.Second {
		t.Errorf("after 20 s: %v", d)
	}
	now = now.Add(time.Hour)
	if d := tr.delay(key, opts); d != 66*time.Second {
		t.Errorf("after an hour: %v", d)
	}
	tr.reset(key)
	if d := tr.delay(key, opts); d != 5500*time.Millisecond {
		t.Errorf("after reset: %v", d)
	}

	// Real random source: bounds hold.
	opts.Rand = nil
	opts = opts.withDefaults()
	for range 200 {
		if d := tr.delay(key, opts); d < 5*time.Second || d >= 6*time.Second {
			t.Fatalf("jittered %v outside [5s, 6s)", d)
		}
	}
}

func TestOptions(t *testing.T) {
	o := DefaultOptions()
	for _, id := range DefectIDs() {
		if want := id == DefectConditionMapOrder; o.IsLive(id) != want {
			t.Errorf("%s live=%v, want %v", id, o.IsLive(id), want)
		}
	}
	o2 := o.WithDefect(DefectStatusSSAZeroFields, true)
	if !o2.IsLive(DefectStatusSSAZeroFields) || o.IsLive(DefectStatusSSAZeroFields) {
		t.Error("WithDefect must copy")
	}
	s := Options{}.Scaled(0.01)
	if s.StorageClassRequeue != 100*time.Millisecond || s.DrainRequeue != 20*time.Millisecond ||
		s.UnconvergedRequeueMax != 600*time.Millisecond || s.UnconvergedJitter != 0.2 {
		t.Errorf("scaled %+v", s)
	}
	if (Options{UnconvergedJitter: -1}).withDefaults().UnconvergedJitter != 0 {
		t.Error("negative jitter means none")
	}
	if len(FieldOwners()) != 4 || len(DefectIDs()) != 7 {
		t.Error("catalog sizes")
	}
}

func readyPod(name, component string, ready, dataReady bool) corev1.Pod {
	cs := func(b bool) corev1.ConditionStatus {
		if b {
			return corev1.ConditionTrue
		}
		return corev1.ConditionFalse
	}
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelComponent: component}}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cs(ready)}}
	if component == ComponentShardPool {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: PodConditionPoolerDataReady, Status: cs(dataReady)})
	}
	return p
}

func TestComputeShardStatus(t *testing.T) {
	s := testShard()
	now := metav1.NewTime(time.Unix(2000, 0))
	st := computeShardStatus(s, nil, nil, 0, now)
	if st.Phase != mgv1.PhaseProgressing || st.OrchReady || st.PoolsReady || st.ObservedGeneration != 3 ||
		st.Message != "PoolsReady: false, OrchReady: false" || !slices.Equal(st.Cells, []string{"z1", "z2"}) {
		t.Errorf("empty: %+v", st)
	}

	var pool []corev1.Pod
	for _, d := range desiredPoolPods(s) {
		pool = append(pool, readyPod(d.Name, ComponentShardPool, true, true))
	}
	orch := []corev1.Pod{readyPod("s-multiorch-z1", ComponentMultiorch, true, false),
		readyPod("s-multiorch-z2", ComponentMultiorch, true, false)}
	s.Status.PodRoles = map[string]string{}
	for _, p := range pool {
		s.Status.PodRoles[p.Name] = topo.RoleReplica
	}
	st = computeShardStatus(s, pool, orch, 6, now)
	if st.Phase != mgv1.PhaseHealthy || !st.OrchReady || !st.PoolsReady || st.ReadyReplicas != 4 || len(st.PodRoles) != 4 {
		t.Errorf("healthy: %+v", st)
	}
	if c := meta.FindStatusCondition(st.Conditions, mgv1.ConditionAvailable); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("available: %+v", st.Conditions)
	}
	if c := meta.FindStatusCondition(st.Conditions, mgv1.ConditionPostureConsistent); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("posture: %+v", st.Conditions)
	}
	if meta.FindStatusCondition(st.Conditions, mgv1.ConditionStorageClassValid) != nil ||
		meta.FindStatusCondition(st.Conditions, mgv1.ConditionReadyForDeletion) != nil {
		t.Errorf("updateStatus must not carry StorageClassValid, nor ReadyForDeletion unless pending: %+v", st.Conditions)
	}

	// lastTransitionTime is kept when the status does not change.
	s.Status.Conditions = st.Conditions
	later := metav1.NewTime(now.Add(time.Minute))
	st2 := computeShardStatus(s, pool, orch, 6, later)
	if c := meta.FindStatusCondition(st2.Conditions, mgv1.ConditionAvailable); !c.LastTransitionTime.Equal(&now) {
		t.Errorf("lastTransitionTime moved: %v", c.LastTransitionTime)
	}

	// MG-MULTIORCH-COUNTED-AS-POOL: the multiorch pods in the pool list are never PoolerDataReady.
	st = computeShardStatus(s, append(slices.Clone(pool), orch...), orch, 6, later)
	if st.PoolsReady || st.Phase != mgv1.PhaseProgressing || st.ReadyReplicas != 4 {
		t.Errorf("multiorch counted as pool: %+v", st)
	}

	// A missing pool pod, and a not-ready orch pod.
	st = computeShardStatus(s, pool[1:], orch[:1], 5, later)
	if st.PoolsReady || st.OrchReady {
		t.Errorf("missing pods: %+v", st)
	}

	// Degraded while StorageClassValid is False.
	s.Status.Conditions = append(s.Status.Conditions, storageClassCondition([]string{"x"}, 3))
	if st = computeShardStatus(s, pool, orch, 6, later); st.Phase != mgv1.PhaseDegraded {
		t.Errorf("degraded: %+v", st)
	}

	// Pending deletion: ReadyForDeletion follows the pods left.
	s.Annotations = map[string]string{AnnotationPendingDeletion: "true"}
	if c := meta.FindStatusCondition(computeShardStatus(s, pool, orch, 6, later).Conditions, mgv1.ConditionReadyForDeletion); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("rfd with pods: %+v", c)
	}
	if c := meta.FindStatusCondition(computeShardStatus(s, nil, nil, 0, later).Conditions, mgv1.ConditionReadyForDeletion); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("rfd without pods: %+v", c)
	}

	// Zero pool replicas: pools vacuously ready.
	z := testShard()
	z.Spec.Pools = map[string]mgv1.PoolSpec{"a": {Cells: []string{"z1"}}}
	if st := computeShardStatus(z, nil, orch[:1], 1, now); !st.PoolsReady || !st.OrchReady {
		t.Errorf("zero replicas: %+v", st)
	}
}

func TestPosture(t *testing.T) {
	full := topo.Pooler{Lifecycle: topo.LifecycleServing, Initialized: true, AcceptingConnections: true, CohortEligible: true, InCommittedCohort: true}
	if ok, r := posture(&full); !ok || r != ReasonPostureReady {
		t.Errorf("full: %v %s", ok, r)
	}
	if _, r := posture(nil); r != ReasonPoolerNotRegistered {
		t.Error(r)
	}
	p := full
	p.Initialized, p.CohortEligible = false, false
	if ok, r := posture(&p); ok || r != ReasonPoolerNotInitialized {
		t.Errorf("first failing reason: %s", r)
	}
	p = full
	p.InCommittedCohort = false
	if _, r := posture(&p); r != ReasonNotInCommittedCohort {
		t.Error(r)
	}
	roles := desiredPodRoles([]corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}, {ObjectMeta: metav1.ObjectMeta{Name: "c"}}},
		poolersByHost([]topo.Pooler{
			{Hostname: "a", Role: topo.RolePrimary, Lifecycle: topo.LifecycleServing},
			{Hostname: "b", Role: "", Lifecycle: topo.LifecycleServing},
			{Hostname: "c", Role: topo.RoleReplica, Lifecycle: topo.LifecycleShutdown},
		}))
	if len(roles) != 1 || roles["a"] != topo.RolePrimary {
		t.Errorf("roles %v", roles)
	}
}

func TestDesiredFanOut(t *testing.T) {
	c := &mgv1.MultigresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "mg", Namespace: "ns", UID: "uid-c"},
		Spec: mgv1.MultigresClusterSpec{Cells: []string{"z1"}, Databases: []mgv1.DatabaseSpec{
			{Name: "db", TableGroups: []mgv1.TableGroupTemplate{{Name: "default", Shards: []mgv1.ShardTemplate{{Name: "0-inf"}}}, {Name: "tg2"}}},
		}},
	}
	tgs := DesiredTableGroups(c)
	if len(tgs) != 2 || tgs[0].Name != "mg-db-default" || !ownedBy(tgs[0], c) || tgs[0].Labels[LabelCluster] != "mg" {
		t.Fatalf("tablegroups %+v", tgs)
	}
	tgs[0].UID = "uid-tg"
	sh := DesiredShards(tgs[0])
	if len(sh) != 1 || sh[0].Name != "mg-db-default-0-inf" || !ownedBy(sh[0], tgs[0]) ||
		sh[0].Labels[LabelCluster] != "mg" || sh[0].Spec.ShardName != "0-inf" || sh[0].Spec.DatabaseName != "db" {
		t.Fatalf("shards %+v", sh)
	}
	u, err := specPayload(sh[0], gvkShard)
	if err != nil {
		t.Fatal(err)
	}
	if u.Object["status"] != nil || u.GetKind() != "Shard" || u.GetAPIVersion() != "multigres.com/v1alpha1" {
		t.Errorf("payload %v", u.Object)
	}
	if _, ok := u.Object["metadata"].(map[string]any)["creationTimestamp"]; ok {
		t.Error("creationTimestamp must not be applied")
	}
}

// TestPodGone checks the fixed MG-PRUNE-ON-STALE-PODS decision: a pooler's pod is gone only when the
// uncached read finds no pod of that name the shard controls.
func TestPodGone(t *testing.T) {
	shard := testShard()
	owned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "owned", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{controllerRef(shard, gvkShard)}}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns"}}
	r := &ShardReconciler{APIReader: fake.NewClientBuilder().WithObjects(owned, other).Build()}
	for name, want := range map[string]bool{"owned": false, "other": true, "missing": true} {
		if got, err := r.podGone(t.Context(), shard, name); err != nil || got != want {
			t.Errorf("podGone(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := (&ShardReconciler{}).podGone(t.Context(), shard, "owned"); err == nil || !strings.Contains(err.Error(), "APIReader is nil") {
		t.Errorf("a nil APIReader gave %v, want an error naming it", err)
	}
}
