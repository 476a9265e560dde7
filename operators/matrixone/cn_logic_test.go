package matrixone

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// cnPod builds a CN pool pod of pool "pool" with phase, created age seconds after t0, and extra labels.
func cnPod(name, phase string, age int, extra ...string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second)),
		Labels: map[string]string{LabelComponent: ComponentCN, LabelPoolName: "pool", LabelPhase: phase, "app": "cn"},
	}}
	for i := 0; i+1 < len(extra); i += 2 {
		p.Labels[extra[i]] = extra[i+1]
	}
	return p
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func claimNamed(name, pod string) mov1.CNClaim {
	return mov1.CNClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: mov1.CNClaimSpec{
		PodName: pod, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cn"}},
	}}
}

func TestCNSelectOrder(t *testing.T) {
	pods := []corev1.Pod{
		cnPod("young", PhaseIdle, 30),
		cnPod("old", PhaseIdle, 10),
		cnPod("mine-young", PhaseIdle, 40, LabelLastOwner, "tenant"),
		cnPod("mine-old", PhaseIdle, 20, LabelLastOwner, "tenant"),
		cnPod("other-owner", PhaseIdle, 0, LabelLastOwner, "someone"),
		cnPod("b-tie", PhaseIdle, 10),
	}
	CNSelectOrder(pods, "tenant")
	want := []string{"mine-old", "mine-young", "other-owner", "b-tie", "old", "young"}
	if got := names(pods); !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	CNSelectOrder(pods, "") // no owner: age only
	if got := names(pods); got[0] != "other-owner" || got[len(got)-1] != "mine-young" {
		t.Errorf("order without owner %v", got)
	}
}

func TestCNSelectCandidates(t *testing.T) {
	deleting := cnPod("deleting", PhaseIdle, 1)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	pods := []corev1.Pod{
		cnPod("idle-a", PhaseIdle, 1),
		cnPod("idle-b", PhaseIdle, 2),
		cnPod("bound", PhaseBound, 0, LabelClaimedBy, "x"),
		cnPod("unknown", PhaseUnknown, 0),
		cnPod("outdated", PhaseIdle, 0, LabelOutdated, "true"),
		cnPod("other-pool", PhaseIdle, 0, LabelPoolName, "other"),
		cnPod("no-match", PhaseIdle, 0, "app", "db"),
		deleting,
	}
	self := claimNamed("self", "")
	self.Spec.PoolName = "pool"
	// Another claim was just migrated to idle-a: its spec.podName names the pod, which is still labelled Idle.
	claims := []mov1.CNClaim{self, claimNamed("migrated", "idle-a"), claimNamed("lost", "idle-b")}
	claims[2].Status.Phase = mov1.CNClaimPhaseLost

	live, err := CNSelectCandidates(&self, pods, claims, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(live); !slices.Equal(got, []string{"idle-a", "idle-b"}) {
		t.Errorf("MO-CLAIM-DOUBLE-BIND live: candidates %v, want [idle-a idle-b] (idle-a double-binds)", got)
	}
	fixed, err := CNSelectCandidates(&self, pods, claims, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(fixed); !slices.Equal(got, []string{"idle-b"}) {
		t.Errorf("MO-CLAIM-DOUBLE-BIND fixed: candidates %v, want [idle-b] (a Lost claim does not hold a pod)", got)
	}
	bad := claimNamed("bad", "")
	bad.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
	if _, err := CNSelectCandidates(&bad, pods, nil, false); err == nil {
		t.Error("an invalid selector must be an error")
	}
}

func TestCNReferencedPods(t *testing.T) {
	mig := claimNamed("mig", "p2")
	mig.Spec.SourcePod = &mov1.CNClaimSourcePod{PodName: "p1"}
	gone := claimNamed("gone", "p3")
	gone.DeletionTimestamp = &metav1.Time{Time: t0}
	claims := []mov1.CNClaim{claimNamed("self", "p0"), mig, gone}
	if got := CNReferencedPods(claims, "self", false); len(got) != 1 || got["p2"] != "mig" {
		t.Errorf("without sources: %v", got)
	}
	if got := CNReferencedPods(claims, "self", true); len(got) != 2 || got["p1"] != "mig" {
		t.Errorf("with sources: %v", got)
	}
}

func TestCNPoolDeletionOrder(t *testing.T) {
	pods := []corev1.Pod{
		cnPod("idle-old", PhaseIdle, 1),
		cnPod("idle-new", PhaseIdle, 9),
		cnPod("unknown", PhaseUnknown, 1),
		cnPod("terminating", PhaseTerminating, 1),
		cnPod("idle-claimed", PhaseIdle, 20, LabelClaimedBy, "c"),
		cnPod("unknown-claimed", PhaseUnknown, 20, LabelClaimedBy, "c"),
		cnPod("bound", PhaseBound, 30, LabelClaimedBy, "c"),
	}
	CNPoolDeletionOrder(pods)
	// unknown-claimed (1+1) ties with idle-new/idle-old (2) and goes first among them: newest first.
	want := []string{"terminating", "unknown", "unknown-claimed", "idle-new", "idle-old", "idle-claimed", "bound"}
	if got := names(pods); !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestCNSplitPoolPods(t *testing.T) {
	del := cnPod("del", PhaseIdle, 0)
	del.DeletionTimestamp = &metav1.Time{Time: t0}
	s := cnSplitPoolPods([]corev1.Pod{cnPod("b", PhaseBound, 0), cnPod("d", PhaseDraining, 0),
		cnPod("i", PhaseIdle, 0), cnPod("u", PhaseUnknown, 0), cnPod("t", PhaseTerminating, 0), del})
	if !slices.Equal(names(s.inUse), []string{"b", "d"}) || !slices.Equal(names(s.idle), []string{"i", "u"}) ||
		!slices.Equal(names(s.terminating), []string{"t", "del"}) {
		t.Errorf("split %+v", s)
	}
}

func TestCNClaimScaleInOrder(t *testing.T) {
	mk := func(name, pod string, phase mov1.CNClaimPhase) mov1.CNClaim {
		c := claimNamed(name, pod)
		c.Status.Phase = phase
		return c
	}
	migrating := mk("migrating", "p9", mov1.CNClaimPhaseBound)
	migrating.Spec.SourcePod = &mov1.CNClaimSourcePod{PodName: "p8"}
	claims := []mov1.CNClaim{
		mk("bound-busy", "p1", mov1.CNClaimPhaseBound),
		mk("bound-quiet", "p2", mov1.CNClaimPhaseBound),
		mk("outdated", "p3", mov1.CNClaimPhaseOutdated),
		mk("pending-with-pod", "p4", mov1.CNClaimPhasePending),
		mk("pending", "", mov1.CNClaimPhasePending),
		migrating,
	}
	cost := func(n string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationDeletionCost: n}}}
	}
	pods := map[string]*corev1.Pod{"p1": cost("7"), "p2": cost("1")}
	var got []string
	for _, c := range CNClaimScaleInOrder(claims, pods) {
		got = append(got, c.Name)
	}
	want := []string{"pending", "pending-with-pod", "outdated", "bound-quiet", "bound-busy"}
	if !slices.Equal(got, want) {
		t.Errorf("scale-in order %v, want %v (never the migrating claim)", got, want)
	}
}

func TestCNClaimForSet(t *testing.T) {
	s := &mov1.CNClaimSet{ObjectMeta: metav1.ObjectMeta{Name: "set", Namespace: "ns", UID: "u"},
		Spec: mov1.CNClaimSetSpec{Replicas: 2, Template: mov1.CNClaimTemplate{
			Metadata: mov1.CNClaimTemplateMeta{Labels: map[string]string{"tier": "a"}},
			Spec: mov1.CNClaimSpec{PodName: "leak", Selector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"app": "cn"}}},
		}}}
	c := CNClaimForSet(s, "abcde")
	if c.Name != "set-abcde" || c.Labels[LabelClaimSet] != "set" || c.Labels[LabelClaimInstanceID] != "abcde" ||
		c.Labels["tier"] != "a" || c.Spec.OwnerName != "set" || c.Spec.PodName != "" ||
		metav1.GetControllerOf(c).Name != "set" {
		t.Errorf("claim %+v", c)
	}
	sel, err := CNClaimSetSelector(s)
	if err != nil || sel.String() != LabelClaimSet+"=set" {
		t.Errorf("default selector %v %v", sel, err)
	}
	if s.Spec.Template.Metadata.Labels[LabelClaimSet] != "" {
		t.Error("CNClaimForSet changed the template")
	}
}

func TestCNResult(t *testing.T) {
	opts := Options{}.WithDefaults()
	if res, err := cnResult(cnResync(3*time.Second, "x"), opts); err != nil || res.RequeueAfter != 3*time.Second {
		t.Errorf("resync: %v %v", res, err)
	}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("changed"))
	if res, err := cnResult(fmt.Errorf("wrapped: %w", conflict), opts); err != nil || res.RequeueAfter != opts.ConflictRequeue {
		t.Errorf("conflict: %v %v", res, err)
	}
	if _, err := cnResult(errors.New("boom"), opts); err == nil {
		t.Error("a plain error must be returned")
	}
}

// stubHK is a hakeeper.Client whose GetClusterDetails returns stores and counts its calls.
type stubHK struct {
	hakeeper.Client
	stores []hakeeper.CNStore
	calls  int
	err    error
}

func (s *stubHK) GetClusterDetails(context.Context) (hakeeper.ClusterDetails, error) {
	s.calls++
	return hakeeper.ClusterDetails{CNStores: slices.Clone(s.stores)}, s.err
}

func TestStoreCache(t *testing.T) {
	now := t0
	opts := Options{StoreCacheRefresh: 15 * time.Second, Now: func() time.Time { return now }}
	c := NewStoreCache(opts)
	hk := &stubHK{stores: []hakeeper.CNStore{{UUID: "a", WorkState: hakeeper.WorkStateWorking}}}
	ctx := context.Background()
	if st, err := c.Get(ctx, hk, "ns", "mo", "a"); err != nil || st.WorkState != hakeeper.WorkStateWorking || hk.calls != 1 {
		t.Fatalf("first get: %+v %v calls=%d", st, err, hk.calls)
	}
	hk.stores = append(hk.stores, hakeeper.CNStore{UUID: "b"})
	now = now.Add(14 * time.Second)
	if _, err := c.Get(ctx, hk, "ns", "mo", "b"); !errors.Is(err, hakeeper.ErrNotInCache) || hk.calls != 1 {
		t.Fatalf("b registered after the snapshot: want ErrNotInCache without refresh, got %v calls=%d", err, hk.calls)
	}
	if _, err := c.Get(ctx, hk, "ns", "other", "b"); err != nil || hk.calls != 2 {
		t.Errorf("another LogSet has its own snapshot: %v calls=%d", err, hk.calls)
	}
	now = now.Add(time.Second)
	if _, err := c.Get(ctx, hk, "ns", "mo", "b"); err != nil || hk.calls != 3 {
		t.Fatalf("after Refresh: %v calls=%d", err, hk.calls)
	}
	hk.err = errors.New("hakeeper down")
	now = now.Add(time.Minute)
	if _, err := c.Get(ctx, hk, "ns", "mo", "a"); err == nil || errors.Is(err, hakeeper.ErrNotInCache) {
		t.Errorf("a failed refresh is its own error, got %v", err)
	}
	hk.err = nil
	c.Invalidate("ns", "mo")
	if _, err := c.Get(ctx, hk, "ns", "mo", "a"); err != nil {
		t.Errorf("after Invalidate: %v", err)
	}
	var zero StoreCache
	if _, err := zero.Get(ctx, hk, "ns", "mo", "a"); err != nil {
		t.Errorf("zero StoreCache: %v", err)
	}
}

func TestCNPoolPod(t *testing.T) {
	pool := &mov1.CNPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", UID: "u"},
		Spec: mov1.CNPoolSpec{PodLabels: map[string]string{"app": "cn"}, Deps: mov1.CNPoolDeps{LogSet: "mo"}}}
	p := CNPoolPod(pool, "pool-abcde")
	if p.Labels[LabelPhase] != PhaseUnknown || p.Labels[LabelPoolName] != "pool" || p.Labels[LabelComponent] != ComponentCN ||
		p.Labels["app"] != "cn" || p.Annotations[AnnotationManagementPolicy] != ManagementPolicyPooling ||
		!slices.Contains(p.Finalizers, FinalizerCNDraining) || p.Spec.ReadinessGates[0].ConditionType != PodConditionCNStore ||
		p.Spec.Containers[0].Image != CNDefaultImage || metav1.GetControllerOf(p).Name != "pool" {
		t.Errorf("pod %+v", p)
	}
	if CNStoreUUID(p) != hakeeper.StoreUUID("ns", "pool-abcde", "pool") {
		t.Error("store uuid must come from namespace, name and subdomain")
	}
	if pool.Spec.PodLabels[LabelPhase] != "" {
		t.Error("CNPoolPod changed the pool's podLabels")
	}
}

func TestCNLabels(t *testing.T) {
	in := []mov1.CNLabel{{Key: "b", Values: []string{"2"}}, {Key: "a", Values: []string{"1"}}}
	hl := cnLabelsFromAPI(in)
	if hl[0].Key != "a" || hl[1].Key != "b" {
		t.Errorf("sorted %v", hl)
	}
	back := cnLabelsToAPI([]hakeeper.Label{{Key: "z"}, {Key: "y", Values: []string{"v"}}})
	if back[0].Key != "y" || back[1].Key != "z" {
		t.Errorf("to api %v", back)
	}
	if in[0].Key != "b" {
		t.Error("input reordered")
	}
}
