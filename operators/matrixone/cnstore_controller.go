package matrixone

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

// CNScore is the content of a CN pod's matrixorigin.io/score annotation (JSON): what its CN process
// reports, and when the pod started.
type CNScore struct {
	// Sessions, Pipelines and Replicas are the store's counts in HAKeeper.
	Sessions  int `json:"sessions"`
	Pipelines int `json:"pipelines"`
	Replicas  int `json:"replicas"`
	// Started is the pod's start time (RFC 3339), empty before it runs.
	Started string `json:"started,omitempty"`
}

// CNStoreReconciler is the pod controller of CN pods (controller "matrixone-cnstore"; pods labelled
// matrixorigin.io/component=CNSet), docs/architecture.md §7 CNStore. Its finalizer is the pod's
// matrixorigin.io/cn-draining (CNPoolPod puts it on at creation).
//
//   - Pod being deleted: PatchCNStore(Draining), wait (requeue DrainRequeue) until the store's sessions reach
//     0 or the drain timeout passes (from the deletion timestamp), DeleteCNStore (best effort), remove the
//     finalizer.
//   - Otherwise: ensure the finalizer; sync the store's counts into the score and deletion-cost annotations;
//     then by phase label: Unknown -> Idle once the store is in the StoreCache (readiness condition
//     matrixorigin.io/cn-store True), else the condition False; Draining -> Terminating past the drain
//     timeout (the pool's reclaimTimeout, else DrainTimeout, from reclaimed-at), requeue DrainRequeue before
//     MinDrainDelay, Idle (Terminating with delete-on-reclaim=true) once sessions are 0, else requeue
//     DrainRequeue; Bound and Idle -> condition True. Resync StoreResync.
//
// The operator never registers a store: CN processes do (fakes/hakeeperfake simulates them). Watch: CN pods, on
// generation, label or annotation changes other than its own score and deletion-cost writes, deletion,
// creation.
type CNStoreReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// Options are the defect switches and durations; zero durations mean their defaults.
	Options Options
	// HAKeeper hands out the LogSets' HAKeeper instances (fakes/hakeeperfake in tests); required.
	HAKeeper hakeeper.Registry
	// Stores is the operator's HAKeeper store cache; nil means a cache of the reconciler's own (share one
	// with CNClaimReconciler).
	Stores *StoreCache

	once sync.Once
}

// SetupWithManager registers the controller "matrixone-cnstore" with mgr: For(Pod) filtered to
// CN pods.
func (r *CNStoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	own := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		strip := func(m map[string]string) map[string]string {
			m = maps.Clone(m)
			delete(m, AnnotationScore)
			delete(m, AnnotationDeletionCost)
			return m
		}
		return !maps.Equal(strip(e.ObjectOld.GetAnnotations()), strip(e.ObjectNew.GetAnnotations()))
	}}
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(cnIsCNPod),
			predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{},
				own, cnDeletionStarted()))).
		Named(CNStoreControllerName).
		Complete(r)
}

func (r *CNStoreReconciler) stores() *StoreCache {
	r.once.Do(func() {
		if r.Stores == nil {
			r.Stores = NewStoreCache(r.Options)
		}
	})
	return r.Stores
}

// Reconcile runs one pass over one CN pod.
func (r *CNStoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	opts := r.Options.WithDefaults()
	if r.Client == nil {
		return ctrl.Result{}, errCNNilClient
	}
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cnIsCNPod(pod) {
		return ctrl.Result{}, nil
	}
	res, err := r.reconcile(ctx, pod, opts)
	if err != nil {
		return cnResult(err, opts)
	}
	return res, nil
}

// instance returns the HAKeeper instance of the pod's pool's LogSet, the LogSet's name and the pool (nil
// when missing); a nil client when there is none (pool gone, LogSet not Ready).
func (r *CNStoreReconciler) instance(ctx context.Context, pod *corev1.Pod, opts Options) (
	hakeeper.Client, string, *mov1.CNPool, error) {
	pool := &mov1.CNPool{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[LabelPoolName]},
		pool); err != nil {
		return nil, "", nil, client.IgnoreNotFound(err)
	}
	hk, logSet, err := cnInstance(ctx, r.Client, r.HAKeeper, opts, pod.Namespace, pool.Name)
	var rs *cnResyncError
	if errors.As(err, &rs) {
		return nil, logSet, pool, nil
	}
	return hk, logSet, pool, err
}

// cnDrainTimeout is the pool's reclaimTimeout, else opts.DrainTimeout.
func cnDrainTimeout(pool *mov1.CNPool, opts Options) time.Duration {
	if pool != nil && pool.Spec.Strategy.UpdateStrategy.ReclaimTimeout != nil {
		return pool.Spec.Strategy.UpdateStrategy.ReclaimTimeout.Duration
	}
	return opts.DrainTimeout
}

// reconcile runs one pass over CN pod pod: it finalizes a pod being deleted, else ensures the finalizer, syncs
// the store's counts into the pod's annotations and moves the pod along its phases.
func (r *CNStoreReconciler) reconcile(ctx context.Context, pod *corev1.Pod, opts Options) (ctrl.Result, error) {
	hk, logSet, pool, err := r.instance(ctx, pod, opts)
	if err != nil {
		return ctrl.Result{}, err
	}
	uuid := CNStoreUUID(pod)
	now := opts.Now()

	if !pod.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, hk, pod, pool, uuid, now, opts)
	}

	if err := r.ensureFinalizer(ctx, pod); err != nil {
		return ctrl.Result{}, err
	}
	if hk == nil {
		return ctrl.Result{RequeueAfter: opts.StoreResync}, nil
	}

	// The store's counts, straight from HAKeeper (the CN process reports them).
	st, err := hk.GetCNState(ctx, uuid)
	registered := err == nil
	if err != nil && !errors.Is(err, hakeeper.ErrStoreNotExist) {
		return ctrl.Result{}, err
	}
	if registered {
		if err := r.syncScore(ctx, pod, st); err != nil {
			return ctrl.Result{}, err
		}
	}

	result := ctrl.Result{RequeueAfter: opts.StoreResync}
	switch pod.Labels[LabelPhase] {
	case PhaseUnknown, "":
		if err := r.admit(ctx, hk, pod, logSet, uuid); err != nil {
			return ctrl.Result{}, err
		}
	case PhaseDraining:
		return r.drain(ctx, pod, pool, st, now, opts)
	case PhaseBound, PhaseIdle:
		if err := r.setReady(ctx, pod, true); err != nil {
			return ctrl.Result{}, err
		}
	}
	return result, nil
}

// finalize handles a CN pod being deleted: it marks the store Draining, waits (requeue DrainRequeue) while the
// store has sessions and the drain timeout has not passed since the deletion timestamp, deletes the store
// (best effort) and removes the pod's finalizer.
func (r *CNStoreReconciler) finalize(ctx context.Context, hk hakeeper.Client, pod *corev1.Pod, pool *mov1.CNPool,
	uuid string, now time.Time, opts Options) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pod, FinalizerCNDraining) {
		return ctrl.Result{}, nil
	}
	if hk != nil {
		st, err := hk.GetCNState(ctx, uuid)
		switch {
		case errors.Is(err, hakeeper.ErrStoreNotExist):
		case err != nil:
			return ctrl.Result{}, err
		default:
			if st.WorkState != hakeeper.WorkStateDraining && st.WorkState != hakeeper.WorkStateDrained {
				if err := hk.PatchCNStore(ctx, uuid, hakeeper.WorkStateDraining, nil); err != nil &&
					!errors.Is(err, hakeeper.ErrStoreNotExist) {
					return ctrl.Result{}, err
				}
			}
			if st.Sessions > 0 && now.Sub(pod.DeletionTimestamp.Time) < cnDrainTimeout(pool, opts) {
				return ctrl.Result{RequeueAfter: opts.DrainRequeue}, nil
			}
		}
		_ = hk.DeleteCNStore(ctx, uuid) // best effort
	}
	p := pod.DeepCopy()
	controllerutil.RemoveFinalizer(p, FinalizerCNDraining)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, p, client.FieldOwner(FieldOwner)))
}

// ensureFinalizer puts the matrixorigin.io/cn-draining finalizer on the pod when it is missing.
func (r *CNStoreReconciler) ensureFinalizer(ctx context.Context, pod *corev1.Pod) error {
	if controllerutil.ContainsFinalizer(pod, FinalizerCNDraining) {
		return nil
	}
	p := pod.DeepCopy()
	controllerutil.AddFinalizer(p, FinalizerCNDraining)
	if err := r.Client.Update(ctx, p, client.FieldOwner(FieldOwner)); err != nil {
		return err
	}
	*pod = *p
	return nil
}

// admit handles a pod in phase Unknown: it sets the readiness condition from whether the store is in the
// StoreCache, and moves the pod to Idle once it is.
func (r *CNStoreReconciler) admit(ctx context.Context, hk hakeeper.Client, pod *corev1.Pod, logSet, uuid string) error {
	_, err := r.stores().Get(ctx, hk, pod.Namespace, logSet, uuid)
	inCache := err == nil
	if err != nil && !errors.Is(err, hakeeper.ErrNotInCache) {
		return err
	}
	if err := r.setReady(ctx, pod, inCache); err != nil {
		return err
	}
	if inCache {
		if err := r.setPhase(ctx, pod, PhaseIdle); err != nil {
			return err
		}
	}
	return nil
}

// drain handles a pod in phase Draining: Terminating past the drain timeout (from reclaimed-at), a requeue
// after DrainRequeue before MinDrainDelay, Idle (Terminating with delete-on-reclaim=true) once the store's
// sessions are 0, else a requeue after DrainRequeue.
func (r *CNStoreReconciler) drain(ctx context.Context, pod *corev1.Pod, pool *mov1.CNPool, st hakeeper.CNStore,
	now time.Time, opts Options) (ctrl.Result, error) {
	result := ctrl.Result{RequeueAfter: opts.StoreResync}
	reclaimed, perr := time.Parse(time.RFC3339Nano, pod.Annotations[AnnotationReclaimedAt])
	if perr != nil {
		reclaimed = now
	}
	elapsed := now.Sub(reclaimed)
	switch {
	case elapsed > cnDrainTimeout(pool, opts):
		return result, r.setPhase(ctx, pod, PhaseTerminating)
	case elapsed < opts.MinDrainDelay:
		return ctrl.Result{RequeueAfter: opts.DrainRequeue}, nil
	case st.Sessions == 0:
		next := PhaseIdle
		if pod.Annotations[AnnotationDeleteOnReclaim] == "true" {
			next = PhaseTerminating
		}
		return result, r.setPhase(ctx, pod, next)
	}
	return ctrl.Result{RequeueAfter: opts.DrainRequeue}, nil
}

// syncScore writes the score and deletion-cost annotations from the store's counts, when they changed.
func (r *CNStoreReconciler) syncScore(ctx context.Context, pod *corev1.Pod, st hakeeper.CNStore) error {
	sc := CNScore{Sessions: st.Sessions, Pipelines: st.Pipelines, Replicas: st.Replicas}
	if pod.Status.StartTime != nil {
		sc.Started = pod.Status.StartTime.UTC().Format(time.RFC3339)
	}
	raw, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	cost := strconv.Itoa(st.Sessions)
	if pod.Annotations[AnnotationScore] == string(raw) && pod.Annotations[AnnotationDeletionCost] == cost {
		return nil
	}
	p := pod.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationScore] = string(raw)
	p.Annotations[AnnotationDeletionCost] = cost
	if err := r.Client.Patch(ctx, p, client.MergeFrom(pod), client.FieldOwner(FieldOwner)); err != nil {
		return client.IgnoreNotFound(err)
	}
	*pod = *p
	return nil
}

// setPhase sets the pod's phase label with an optimistic-lock Update.
func (r *CNStoreReconciler) setPhase(ctx context.Context, pod *corev1.Pod, phase string) error {
	if pod.Labels[LabelPhase] == phase {
		return nil
	}
	p := pod.DeepCopy()
	p.Labels[LabelPhase] = phase
	if err := r.Client.Update(ctx, p, client.FieldOwner(FieldOwner)); err != nil {
		return err
	}
	*pod = *p
	return nil
}

// setReady applies the pod's matrixorigin.io/cn-store condition (server-side apply on pods/status, field
// owner matrixone-operator), when its status differs.
func (r *CNStoreReconciler) setReady(ctx context.Context, pod *corev1.Pod, ready bool) error {
	want, reason := corev1.ConditionFalse, "StoreNotInCache"
	if ready {
		want, reason = corev1.ConditionTrue, "StoreRegistered"
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == PodConditionCNStore && c.Status == want {
			return nil
		}
	}
	ac := corev1ac.Pod(pod.Name, pod.Namespace).WithStatus(corev1ac.PodStatus().WithConditions(
		corev1ac.PodCondition().WithType(PodConditionCNStore).WithStatus(want).WithReason(reason).
			WithLastTransitionTime(metav1.NewTime(r.Options.WithDefaults().Now()))))
	return client.IgnoreNotFound(r.Client.Status().Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership))
}
