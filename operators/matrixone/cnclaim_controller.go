package matrixone

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

// ClaimPodNameIndex is the field index of CNClaims on spec.podName that the claim controller registers
// (used to map a pod to the claims naming it when MO-CLAIM-BOUND-TO-MISSING-POD is fixed).
const ClaimPodNameIndex = "spec.podName"

// CNClaimReconciler reconciles CNClaims (controller "matrixone-cnclaim", finalizer
// matrixorigin.io/matrixone-cnclaim), docs/architecture.md §7 CNClaim:
//
//   - Bind (spec.podName empty): phase Pending; an orphan (a pod Bound with claimed-by = the claim) first,
//     else selectCN (CNSelectOrder); ensureOwnership labels the pod with an optimistic-lock Update (a
//     conflict moves to the next pod); syncBindPod sets the HAKeeper store Working with the claim's labels,
//     reads it back from the StoreCache, patches spec.podName/nodeName/poolName and writes status Bound.
//     No pod and no pool: the first pool whose podLabels match the selector is nominated (spec.poolName),
//     requeue ClaimNoPoolRequeue.
//   - Sync (spec.podName set): a missing pod is Lost once status.boundTime is WaitCacheTimeout old (requeue
//     WaitCacheRequeue before), so is a pod Succeeded or Unknown; else ensureOwnership unconditionally,
//     syncBindPod (error: requeue SyncBindRequeue), and migrate when spec.sourcePod is set.
//   - migrate: wait MigrateDelay after status.store.boundTime; source Bound: reclaim it, write progress,
//     requeue MigrateRequeue; Draining: progress, requeue MigrateRequeue; Idle/Terminating (or gone): clear
//     status.migrate and spec.sourcePod.
//   - Finalize: reclaim the pods Bound to the claim (PatchCNStore Draining, pod Draining, claimed-by and
//     owner dropped, last-owner and reclaimed-at set).
//   - Lost is final: the claim is left alone (its CNClaimSet replaces it).
//
// Defects (Options.Live): MO-CLAIM-DOUBLE-BIND (selectCN), MO-CLAIM-BOUND-TO-MISSING-POD (pod watch and
// Lost), MO-MIGRATION-STORM (watch filter and progress writes), MO-CLAIM-FINALIZE-STUCK (Finalize); each
// switch point carries a comment naming the incident.
type CNClaimReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup. It must read from the
	// manager's cache, as mgr.GetClient() does: the pod watch lists claims through the
	// ClaimPodNameIndex field index.
	Client client.Client
	// Options are the defect switches and durations; zero durations mean their defaults.
	Options Options
	// HAKeeper hands out the LogSets' HAKeeper instances (fakes/hakeeperfake in tests); required.
	HAKeeper hakeeper.Registry
	// Stores is the operator's HAKeeper store cache; nil means a cache of the reconciler's own (share one
	// with CNStoreReconciler, as the real operator does).
	Stores *StoreCache

	once sync.Once
}

// SetupWithManager registers the controller "matrixone-cnclaim" with mgr and the field index
// ClaimPodNameIndex. Watches: For(CNClaim) with the default filter (MO-MIGRATION-STORM fixed) or
// "resourceVersion changed" (live); pods (component=CNSet) on status changes, creates and deletes, mapped to
// the claim their claimed-by label names and, with MO-CLAIM-BOUND-TO-MISSING-POD fixed, to the claims whose
// spec.podName names them.
func (r *CNClaimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	opts := r.Options.WithDefaults()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &mov1.CNClaim{}, ClaimPodNameIndex,
		func(o client.Object) []string {
			if c, ok := o.(*mov1.CNClaim); ok && c.Spec.PodName != "" {
				return []string{c.Spec.PodName}
			}
			return nil
		}); err != nil {
		return fmt.Errorf("index CNClaim %s: %w", ClaimPodNameIndex, err)
	}

	// MO-MIGRATION-STORM live: the incident's claim controller overrode the default filter with
	// "resourceVersion changed", so every status write of its own (migration progress above all)
	// re-triggers the claim. Fixed: the framework's default generation/label/annotation filter.
	forFilter := cnDefaultFilter()
	if opts.IsLive(DefectMigrationStorm) {
		forFilter = predicate.ResourceVersionChangedPredicate{}
	}
	podFilter := predicate.And[client.Object](predicate.NewPredicateFuncs(cnIsCNPod), predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			po, ok1 := e.ObjectOld.(*corev1.Pod)
			pn, ok2 := e.ObjectNew.(*corev1.Pod)
			return ok1 && ok2 && !equality.Semantic.DeepEqual(po.Status, pn.Status)
		},
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&mov1.CNClaim{}, builder.WithPredicates(forFilter)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.podToClaims), builder.WithPredicates(podFilter)).
		Named(CNClaimControllerName).
		Complete(r)
}

// podToClaims maps a pod to the claim its claimed-by label names; with MO-CLAIM-BOUND-TO-MISSING-POD fixed
// also to every claim whose spec.podName names it (field index).
func (r *CNClaimReconciler) podToClaims(ctx context.Context, o client.Object) []reconcile.Request {
	seen := map[string]bool{}
	var out []reconcile.Request
	add := func(name string) {
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}})
		}
	}
	add(o.GetLabels()[LabelClaimedBy])
	// MO-CLAIM-BOUND-TO-MISSING-POD live: the incident's pod watch mapped a pod to a claim only through the
	// claimed-by label, so a claim whose pod had been relabelled for another claim was never told the pod
	// went away. Fixed: also the claims whose spec.podName names the pod.
	if !r.Options.IsLive(DefectClaimBoundToMissingPod) {
		list := &mov1.CNClaimList{}
		if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()),
			client.MatchingFields{ClaimPodNameIndex: o.GetName()}); err == nil {
			for _, c := range list.Items {
				add(c.Name)
			}
		}
	}
	return out
}

func (r *CNClaimReconciler) stores() *StoreCache {
	r.once.Do(func() {
		if r.Stores == nil {
			r.Stores = NewStoreCache(r.Options)
		}
	})
	return r.Stores
}

// Reconcile runs one pass of the framework over one CNClaim.
func (r *CNClaimReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	opts := r.Options.WithDefaults()
	var f *cnFrame[*mov1.CNClaim]
	f = &cnFrame[*mov1.CNClaim]{
		c: r.Client, opts: opts, finalizer: FinalizerPrefix + CNClaimControllerName,
		newObj: func() *mov1.CNClaim { return &mov1.CNClaim{} },
		status: func(c *mov1.CNClaim) any { return *c.Status.DeepCopy() },
		observe: func(ctx context.Context, c *mov1.CNClaim) (cnAction, error) {
			return nil, r.observe(ctx, c, opts, func() error { return f.writeStatus(ctx, c) })
		},
		finalize: func(ctx context.Context, c *mov1.CNClaim) (bool, error) { return r.finalize(ctx, c, opts) },
		// MO-MIGRATION-STORM live: migration progress is written on every pass of a migrating claim, so with
		// the resourceVersion filter each pass whose counts moved re-triggers the next at once. Fixed: the
		// status is written only when it changed, and the claim's own status writes do not re-trigger it.
		forceStatus: func(c *mov1.CNClaim) bool {
			return opts.IsLive(DefectMigrationStorm) && c.Status.Migrate != nil
		},
	}
	return f.reconcile(ctx, req.NamespacedName)
}

// observe runs Bind or Sync; writeStatus persists the status computed so far (see lost).
func (r *CNClaimReconciler) observe(ctx context.Context, c *mov1.CNClaim, opts Options, writeStatus func() error) error {
	if c.Status.Phase == mov1.CNClaimPhaseLost {
		if !opts.IsLive(DefectClaimBoundToMissingPod) && (c.Spec.PodName != "" || c.Spec.NodeName != "") {
			return r.patchClaim(ctx, c, func(c *mov1.CNClaim) { c.Spec.PodName, c.Spec.NodeName = "", "" })
		}
		return nil
	}
	if c.Spec.PodName == "" {
		return r.bind(ctx, c, opts)
	}
	return r.sync(ctx, c, opts, writeStatus)
}

// patchClaim patches the claim's metadata and spec as mutate changes them (merge patch, field owner
// matrixone-operator), keeping the in-memory status the pass computed.
func (r *CNClaimReconciler) patchClaim(ctx context.Context, c *mov1.CNClaim, mutate func(*mov1.CNClaim)) error {
	st := c.Status.DeepCopy()
	base := c.DeepCopy()
	mutate(c)
	if equality.Semantic.DeepEqual(base.Spec, c.Spec) && equality.Semantic.DeepEqual(base.Labels, c.Labels) {
		return nil
	}
	err := r.Client.Patch(ctx, c, client.MergeFrom(base), client.FieldOwner(FieldOwner))
	c.Status = *st
	return err
}

// CNSelectOrder sorts bind candidates as selectCN does: pods last owned by ownerName (label
// matrixorigin.io/last-owner) first, then older first, then by name.
func CNSelectOrder(pods []corev1.Pod, ownerName string) {
	prev := func(p *corev1.Pod) bool { return ownerName != "" && p.Labels[LabelLastOwner] == ownerName }
	slices.SortStableFunc(pods, func(a, b corev1.Pod) int {
		if pa, pb := prev(&a), prev(&b); pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if a.CreationTimestamp.Before(&b.CreationTimestamp) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// CNReferencedPods maps the pod names that live claims (not being deleted, not Lost) other than self point
// to through spec.podName (and, with sources true, spec.sourcePod.podName) to the claim's name.
func CNReferencedPods(claims []mov1.CNClaim, self string, sources bool) map[string]string {
	out := map[string]string{}
	for _, c := range claims {
		if c.Name == self || !c.DeletionTimestamp.IsZero() || c.Status.Phase == mov1.CNClaimPhaseLost {
			continue
		}
		if c.Spec.PodName != "" {
			out[c.Spec.PodName] = c.Name
		}
		if sources && c.Spec.SourcePod != nil && c.Spec.SourcePod.PodName != "" {
			out[c.Spec.SourcePod.PodName] = c.Name
		}
	}
	return out
}

// CNSelectCandidates returns the pods selectCN may bind claim to, in bind order: pods matching the claim's
// selector, in phase Idle, of spec.poolName when set, not outdated, not being deleted, sorted by
// CNSelectOrder. With doubleBindLive false (MO-CLAIM-DOUBLE-BIND fixed) a pod another live claim's
// spec.podName points to is skipped.
func CNSelectCandidates(claim *mov1.CNClaim, pods []corev1.Pod, claims []mov1.CNClaim, doubleBindLive bool) (
	[]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("claim %s selector: %w", claim.Name, err)
	}
	referenced := CNReferencedPods(claims, claim.Name, false)
	var out []corev1.Pod
	for _, p := range pods {
		if !cnIsCNPod(&p) || !p.DeletionTimestamp.IsZero() || p.Labels[LabelPhase] != PhaseIdle ||
			!sel.Matches(labels.Set(p.Labels)) || p.Labels[LabelOutdated] != "" {
			continue
		}
		if claim.Spec.PoolName != "" && p.Labels[LabelPoolName] != claim.Spec.PoolName {
			continue
		}
		// MO-CLAIM-DOUBLE-BIND live: the incident's selectCN looked only at the pod's phase label, so an Idle
		// pod the migrator had just given to another claim (its spec.podName set, the pod not yet labelled
		// Bound) was bound a second time. Fixed: skip pods another live claim points to.
		if !doubleBindLive && referenced[p.Name] != "" {
			continue
		}
		out = append(out, p)
	}
	CNSelectOrder(out, claim.Spec.OwnerName)
	return out, nil
}

func (r *CNClaimReconciler) bind(ctx context.Context, c *mov1.CNClaim, opts Options) error {
	if c.Status.Phase == "" {
		c.Status.Phase = mov1.CNClaimPhasePending
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace),
		client.MatchingLabels{LabelComponent: ComponentCN}); err != nil {
		return err
	}
	var cands []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() && p.Labels[LabelPhase] == PhaseBound && p.Labels[LabelClaimedBy] == c.Name {
			cands = append(cands, p) // an orphan: bound to us by an earlier pass that did not finish
		}
	}
	if len(cands) == 0 {
		claims := &mov1.CNClaimList{}
		if err := r.Client.List(ctx, claims, client.InNamespace(c.Namespace)); err != nil {
			return err
		}
		var err error
		if cands, err = CNSelectCandidates(c, pods.Items, claims.Items, opts.IsLive(DefectClaimDoubleBind)); err != nil {
			return err
		}
	}
	if len(cands) == 0 {
		if c.Spec.PoolName == "" {
			pool, err := r.nominatePool(ctx, c)
			if err != nil {
				return err
			}
			if pool != "" {
				if err := r.patchClaim(ctx, c, func(c *mov1.CNClaim) { c.Spec.PoolName = pool }); err != nil {
					return err
				}
			}
		}
		return cnResync(opts.ClaimNoPoolRequeue, "no idle pod for claim %s", c.Name)
	}
	for i := range cands {
		p := &cands[i]
		if err := r.ensureOwnership(ctx, c, p); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue // in the defective version this optimistic lock is the only guard
			}
			return err
		}
		return r.syncBindPod(ctx, c, p, opts)
	}
	return cnResync(opts.ConflictRequeue, "every candidate pod of claim %s was taken", c.Name)
}

// nominatePool returns the first pool (by name) whose podLabels match the claim's selector, or "".
func (r *CNClaimReconciler) nominatePool(ctx context.Context, c *mov1.CNClaim) (string, error) {
	sel, err := metav1.LabelSelectorAsSelector(c.Spec.Selector)
	if err != nil {
		return "", err
	}
	pools := &mov1.CNPoolList{}
	if err := r.Client.List(ctx, pools, client.InNamespace(c.Namespace)); err != nil {
		return "", err
	}
	slices.SortFunc(pools.Items, func(a, b mov1.CNPool) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range pools.Items {
		if p.DeletionTimestamp.IsZero() && sel.Matches(labels.Set(p.Spec.PodLabels)) {
			return p.Name, nil
		}
	}
	return "", nil
}

// ensureOwnership labels pod Bound to the claim (phase, claimed-by, claimset, owner, additional labels)
// with an Update that carries the pod's resourceVersion: a pod changed meanwhile is a conflict.
func (r *CNClaimReconciler) ensureOwnership(ctx context.Context, c *mov1.CNClaim, pod *corev1.Pod) error {
	p := pod.DeepCopy()
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[LabelPhase] = PhaseBound
	p.Labels[LabelClaimedBy] = c.Name
	if cs := c.Labels[LabelClaimSet]; cs != "" {
		p.Labels[LabelClaimSet] = cs
	}
	if c.Spec.OwnerName != "" {
		p.Labels[LabelOwner] = c.Spec.OwnerName
	}
	for k, v := range c.Spec.AdditionalPodLabels {
		p.Labels[k] = v
	}
	if equality.Semantic.DeepEqual(p.Labels, pod.Labels) {
		return nil
	}
	if err := r.Client.Update(ctx, p, client.FieldOwner(FieldOwner)); err != nil {
		return err
	}
	*pod = *p
	return nil
}

// syncBindPod makes the pod's store Working with the claim's labels, reads it back from the store cache
// (refreshed first unless MO-CLAIM-STALE-STORE-STATUS is live), records the binding in spec (podName,
// nodeName, poolName, pool-name label) and in status (Bound, store).
func (r *CNClaimReconciler) syncBindPod(ctx context.Context, c *mov1.CNClaim, pod *corev1.Pod, opts Options) error {
	hk, logSet, err := cnInstance(ctx, r.Client, r.HAKeeper, opts, pod.Namespace, pod.Labels[LabelPoolName])
	if err != nil {
		return err
	}
	uuid := CNStoreUUID(pod)
	lbls := cnLabelsFromAPI(c.Spec.CNLabels)
	if err := hk.PatchCNStore(ctx, uuid, hakeeper.WorkStateWorking, lbls); err != nil {
		return fmt.Errorf("patch cn store %s: %w", uuid, err)
	}
	if len(lbls) == 0 { // PatchCNStore ignores empty labels
		if err := hk.UpdateCNLabel(ctx, uuid, nil); err != nil {
			return fmt.Errorf("clear cn store %s labels: %w", uuid, err)
		}
	}
	// MO-CLAIM-STALE-STORE-STATUS live: the store is read back from the snapshot as it is, which may be older
	// than the patch just made. Fixed: the snapshot is dropped first, so the read-back sees the patch.
	if !opts.IsLive(DefectClaimStaleStoreStatus) {
		r.stores().Invalidate(pod.Namespace, logSet)
	}
	store, err := r.stores().Get(ctx, hk, pod.Namespace, logSet, uuid)
	if err != nil {
		return err
	}
	pool := pod.Labels[LabelPoolName]
	if err := r.patchClaim(ctx, c, func(c *mov1.CNClaim) {
		c.Spec.PodName, c.Spec.NodeName, c.Spec.PoolName = pod.Name, pod.Spec.NodeName, pool
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[LabelPoolName] = pool
	}); err != nil {
		return err
	}
	now := metav1.NewTime(opts.Now().Truncate(time.Second))
	phase := mov1.CNClaimPhaseBound
	if pod.Labels[LabelOutdated] != "" {
		phase = mov1.CNClaimPhaseOutdated
	}
	if c.Status.Phase != mov1.CNClaimPhaseBound && c.Status.Phase != mov1.CNClaimPhaseOutdated || c.Status.BoundTime == nil {
		c.Status.BoundTime = &now
	}
	c.Status.Phase = phase
	storeBound := c.Status.Store.BoundTime
	if c.Status.Store.PodName != pod.Name || storeBound == nil {
		storeBound = &now
	}
	c.Status.Store = mov1.CNClaimStoreStatus{
		ServiceID: uuid, WorkState: string(store.WorkState), Labels: cnLabelsToAPI(store.Labels),
		PodName: pod.Name, BoundTime: storeBound,
	}
	return nil
}

func (r *CNClaimReconciler) sync(ctx context.Context, c *mov1.CNClaim, opts Options, writeStatus func() error) error {
	pod := &corev1.Pod{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.PodName}, pod)
	if apierrors.IsNotFound(err) {
		if c.Status.BoundTime != nil && opts.Now().Sub(c.Status.BoundTime.Time) < opts.WaitCacheTimeout {
			return cnResync(opts.WaitCacheRequeue, "pod %s not found, waiting for the cache", c.Spec.PodName)
		}
		return r.lost(ctx, c, opts, writeStatus)
	}
	if err != nil {
		return err
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodUnknown {
		return r.lost(ctx, c, opts, writeStatus)
	}
	// Unconditional: this is how the migration target is bound, without selectCN's checks.
	if err := r.ensureOwnership(ctx, c, pod); err != nil {
		return err
	}
	if err := r.syncBindPod(ctx, c, pod, opts); err != nil {
		var rs *cnResyncError
		if errors.As(err, &rs) || apierrors.IsConflict(err) {
			return err
		}
		return cnResync(opts.SyncBindRequeue, "sync bind pod %s: %v", pod.Name, err)
	}
	if c.Spec.SourcePod != nil {
		return r.migrate(ctx, c, opts, writeStatus)
	}
	c.Status.Migrate = nil // a migration whose last status write did not land
	return nil
}

// lost marks the claim Lost (Lost is final: the claim is left alone afterwards).
func (r *CNClaimReconciler) lost(ctx context.Context, c *mov1.CNClaim, opts Options, writeStatus func() error) error {
	c.Status.Phase = mov1.CNClaimPhaseLost
	c.Status.Migrate = nil
	// MO-CLAIM-BOUND-TO-MISSING-POD live: the incident's Lost kept spec.podName, so the claim still named a
	// pod that no longer existed (or, recreated under that name, was never its own). Fixed: clear it, once
	// the Lost phase is written (so that a claim with no pod is never taken for one still to bind).
	if opts.IsLive(DefectClaimBoundToMissingPod) {
		return nil
	}
	if err := writeStatus(); err != nil {
		return err
	}
	return r.patchClaim(ctx, c, func(c *mov1.CNClaim) { c.Spec.PodName, c.Spec.NodeName = "", "" })
}

func (r *CNClaimReconciler) migrate(ctx context.Context, c *mov1.CNClaim, opts Options, writeStatus func() error) error {
	srcName := c.Spec.SourcePod.PodName
	done := func() error { // clear status.migrate, then spec.sourcePod
		c.Status.Migrate = nil
		if err := writeStatus(); err != nil {
			return err
		}
		return r.patchClaim(ctx, c, func(c *mov1.CNClaim) { c.Spec.SourcePod = nil })
	}
	src := &corev1.Pod{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: srcName}, src); err != nil {
		if apierrors.IsNotFound(err) {
			return done()
		}
		return err
	}
	var since time.Duration
	if bt := c.Status.Store.BoundTime; bt != nil {
		since = opts.Now().Sub(bt.Time)
	}
	if since < opts.MigrateDelay {
		return cnResync(opts.MigrateDelay-since, "migration of claim %s waits after bind", c.Name)
	}
	switch src.Labels[LabelPhase] {
	case PhaseBound:
		if err := r.reclaimCN(ctx, c, src, opts); err != nil {
			return err
		}
		if err := r.progress(ctx, c, src, opts); err != nil {
			return err
		}
		return cnResync(opts.MigrateRequeue, "source %s reclaimed", srcName)
	case PhaseDraining:
		if err := r.progress(ctx, c, src, opts); err != nil {
			return err
		}
		return cnResync(opts.MigrateRequeue, "source %s draining", srcName)
	}
	return done()
}

// progress records the source's remaining work in status.migrate (from its store in HAKeeper).
func (r *CNClaimReconciler) progress(ctx context.Context, c *mov1.CNClaim, src *corev1.Pod, opts Options) error {
	hk, _, err := cnInstance(ctx, r.Client, r.HAKeeper, opts, src.Namespace, src.Labels[LabelPoolName])
	if err != nil {
		return err
	}
	st, err := hk.GetCNState(ctx, CNStoreUUID(src))
	if err != nil && !errors.Is(err, hakeeper.ErrStoreNotExist) {
		return err
	}
	c.Status.Migrate = &mov1.CNClaimMigrateStatus{Source: mov1.CNWorkload{
		Connections: int32(st.Sessions), Pipelines: int32(st.Pipelines), Replicas: int32(st.Replicas),
	}}
	return nil
}

// reclaimCN drains the pod's store and hands the pod back to the pool: PatchCNStore(Draining) ("does not
// exist" ignored), labels phase Draining, claimed-by/owner/claimset/additional labels removed, last-owner
// set, annotation reclaimed-at set.
func (r *CNClaimReconciler) reclaimCN(ctx context.Context, c *mov1.CNClaim, pod *corev1.Pod, opts Options) error {
	hk, _, err := cnInstance(ctx, r.Client, r.HAKeeper, opts, pod.Namespace, pod.Labels[LabelPoolName])
	if err != nil {
		return err
	}
	if err := hk.PatchCNStore(ctx, CNStoreUUID(pod), hakeeper.WorkStateDraining, nil); err != nil &&
		!errors.Is(err, hakeeper.ErrStoreNotExist) {
		return fmt.Errorf("drain cn store of %s: %w", pod.Name, err)
	}
	p := pod.DeepCopy()
	p.Labels[LabelPhase] = PhaseDraining
	delete(p.Labels, LabelClaimedBy)
	if o := p.Labels[LabelOwner]; o != "" {
		p.Labels[LabelLastOwner] = o
	}
	delete(p.Labels, LabelOwner)
	delete(p.Labels, LabelClaimSet)
	for k := range c.Spec.AdditionalPodLabels {
		delete(p.Labels, k)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationReclaimedAt] = opts.Now().UTC().Format(time.RFC3339Nano)
	if err := r.Client.Update(ctx, p, client.FieldOwner(FieldOwner)); err != nil {
		return err
	}
	*pod = *p
	return nil
}

// finalize reclaims the pods Bound to the claim. A pod another live claim references is skipped.
func (r *CNClaimReconciler) finalize(ctx context.Context, c *mov1.CNClaim, opts Options) (bool, error) {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace),
		client.MatchingLabels{LabelPhase: PhaseBound, LabelClaimedBy: c.Name}); err != nil {
		return false, err
	}
	if len(pods.Items) == 0 {
		return true, nil
	}
	claims := &mov1.CNClaimList{}
	if err := r.Client.List(ctx, claims, client.InNamespace(c.Namespace)); err != nil {
		return false, err
	}
	others := map[string]bool{}
	for _, o := range claims.Items {
		if o.Name != c.Name && o.DeletionTimestamp.IsZero() && o.Spec.PodName != "" {
			others[o.Spec.PodName] = true
		}
	}
	skipped := false
	for i := range pods.Items {
		p := &pods.Items[i]
		if others[p.Name] {
			skipped = true
			// MO-CLAIM-FINALIZE-STUCK live: the incident's Finalize skipped a pod another claim referenced
			// and kept its own claimed-by on it, so the pod stayed "owned" and Finalize never returned done
			// (retrying every 2 s forever). Fixed: drop our claimed-by and skip it.
			if !opts.IsLive(DefectClaimFinalizeStuck) {
				np := p.DeepCopy()
				delete(np.Labels, LabelClaimedBy)
				if err := r.Client.Update(ctx, np, client.FieldOwner(FieldOwner)); err != nil {
					return false, err
				}
			}
			continue
		}
		if err := r.reclaimCN(ctx, c, p, opts); err != nil {
			return false, err
		}
	}
	if skipped && opts.IsLive(DefectClaimFinalizeStuck) {
		return false, nil
	}
	return true, nil
}
