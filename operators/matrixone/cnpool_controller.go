package matrixone

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
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

// CNDefaultImage is the CN container image of a pool whose template names none (no kubelet runs it).
const CNDefaultImage = "matrixorigin/matrixone:latest"

// CNPoolReconciler reconciles CNPools (controller "matrixone-cnpool", finalizer
// matrixorigin.io/matrixone-cnpool). Each pass (docs/architecture.md §7 CNPool):
//
//  1. wait (resync PodSetResync) until the pool's LogSet has a HAKeeper instance (is Ready);
//  2. split the live pool pods (label pool.matrixorigin.io/pool-name=<pool>): Bound or Draining are in use,
//     Terminating aside, the rest (Unknown, Idle) idle;
//  3. pending = claims nominated to the pool (spec.poolName) in phase Pending;
//  4. desired = inUse + pending + maxIdle; over maxPods it is capped and the pool requeues after
//     PoolOverMaxRequeue;
//  5. scale out: create pods in phase Unknown with the pool-name label, the Pooling annotation, the
//     component label matrixorigin.io/component=CNSet, the finalizer matrixorigin.io/cn-draining and the
//     readiness gate matrixorigin.io/cn-store;
//  6. scale in (never while pending > 0): idle pods in deletion-cost order (CNPoolDeletionOrder) are set
//     Terminating with an optimistic-lock Update (skipped on conflict); Terminating pods are deleted.
//
// Being deleted, the pool deletes its pods and drops its finalizer once none is left. Watches: the pool,
// pods by the pool-name label, claims by spec.poolName.
type CNPoolReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// Options are the defect switches and durations; zero durations mean their defaults.
	Options Options
	// HAKeeper hands out the LogSets' HAKeeper instances (fakes/hakeeperfake in tests); required.
	HAKeeper hakeeper.Registry
}

// SetupWithManager registers the controller "matrixone-cnpool" with mgr: For(CNPool) with the
// framework's default filter, pods mapped by their pool-name label, claims by spec.poolName.
func (r *CNPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	podToPool := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if p := o.GetLabels()[LabelPoolName]; p != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: p}}}
		}
		return nil
	})
	claimToPool := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if c, ok := o.(*mov1.CNClaim); ok && c.Spec.PoolName != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.PoolName}}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&mov1.CNPool{}, builder.WithPredicates(cnDefaultFilter())).
		Watches(&corev1.Pod{}, podToPool, builder.WithPredicates(predicate.NewPredicateFuncs(cnIsCNPod),
			predicate.Or[client.Object](predicate.LabelChangedPredicate{}, cnDeletionStarted(), cnCreateDelete()))).
		Watches(&mov1.CNClaim{}, claimToPool).
		Named(CNPoolControllerName).
		Complete(r)
}

// cnCreateDelete passes creates and deletes only.
func cnCreateDelete() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// Reconcile runs one pass of the framework over one CNPool.
func (r *CNPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	opts := r.Options.WithDefaults()
	f := &cnFrame[*mov1.CNPool]{
		c: r.Client, opts: opts, finalizer: FinalizerPrefix + CNPoolControllerName,
		newObj: func() *mov1.CNPool { return &mov1.CNPool{} },
		status: func(p *mov1.CNPool) any { return *p.Status.DeepCopy() },
		observe: func(ctx context.Context, p *mov1.CNPool) (cnAction, error) {
			return r.observe(ctx, p, opts)
		},
		finalize: func(ctx context.Context, p *mov1.CNPool) (bool, error) { return r.finalize(ctx, p) },
	}
	return f.reconcile(ctx, req.NamespacedName)
}

// cnPoolPods are a pool's pods by role.
type cnPoolPods struct {
	inUse, idle, terminating []corev1.Pod
}

// cnSplitPoolPods splits pool pods: Bound or Draining in use; Terminating (label, or being deleted) aside;
// the rest (Unknown, Idle, no phase) idle.
func cnSplitPoolPods(pods []corev1.Pod) cnPoolPods {
	var out cnPoolPods
	for _, p := range pods {
		switch {
		case !p.DeletionTimestamp.IsZero() || p.Labels[LabelPhase] == PhaseTerminating:
			out.terminating = append(out.terminating, p)
		case p.Labels[LabelPhase] == PhaseBound || p.Labels[LabelPhase] == PhaseDraining:
			out.inUse = append(out.inUse, p)
		default:
			out.idle = append(out.idle, p)
		}
	}
	return out
}

// cnPodDeletionRank is the deletion cost rank of a pool pod's phase: Terminating < Unknown < Idle <
// Draining < Bound; a pod with a claimed-by label ranks one higher.
func cnPodDeletionRank(p *corev1.Pod) int {
	rank := 5
	switch p.Labels[LabelPhase] {
	case PhaseTerminating:
		rank = 0
	case PhaseUnknown, "":
		rank = 1
	case PhaseIdle:
		rank = 2
	case PhaseDraining:
		rank = 3
	case PhaseBound:
		rank = 4
	}
	if p.Labels[LabelClaimedBy] != "" {
		rank++
	}
	return rank
}

// CNPoolDeletionOrder sorts pods in the order a pool scales in: lower deletion cost first (Terminating <
// Unknown < Idle < Draining < Bound; a claimed-by label adds one), then newest first, then by name.
func CNPoolDeletionOrder(pods []corev1.Pod) {
	slices.SortStableFunc(pods, func(a, b corev1.Pod) int {
		if ra, rb := cnPodDeletionRank(&a), cnPodDeletionRank(&b); ra != rb {
			return ra - rb
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if a.CreationTimestamp.After(b.CreationTimestamp.Time) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// pods lists the pool's CN pods.
func (r *CNPoolReconciler) pods(ctx context.Context, pool *mov1.CNPool) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(pool.Namespace),
		client.MatchingLabels{LabelPoolName: pool.Name, LabelComponent: ComponentCN}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (r *CNPoolReconciler) observe(ctx context.Context, pool *mov1.CNPool, opts Options) (cnAction, error) {
	if r.HAKeeper == nil {
		return nil, fmt.Errorf("matrixone: CNPoolReconciler has no HAKeeper registry")
	}
	if _, err := r.HAKeeper.Instance(ctx, pool.Namespace, pool.Spec.Deps.LogSet); err != nil {
		if err == hakeeper.ErrNoInstance || apierrors.IsNotFound(err) {
			return nil, cnResync(opts.PodSetResync, "logset %s is not ready", pool.Spec.Deps.LogSet)
		}
		return nil, cnResync(opts.PodSetResync, "logset %s: %v", pool.Spec.Deps.LogSet, err)
	}
	all, err := r.pods(ctx, pool)
	if err != nil {
		return nil, err
	}
	split := cnSplitPoolPods(all)
	claims := &mov1.CNClaimList{}
	if err := r.Client.List(ctx, claims, client.InNamespace(pool.Namespace)); err != nil {
		return nil, err
	}
	pending := 0
	for _, c := range claims.Items {
		if c.Spec.PoolName == pool.Name && c.DeletionTimestamp.IsZero() && c.Spec.PodName == "" &&
			(c.Status.Phase == mov1.CNClaimPhasePending || c.Status.Phase == "") {
			pending++
		}
	}
	inUse, idle := len(split.inUse), len(split.idle)
	desired := inUse + pending + int(pool.Spec.Strategy.ScaleStrategy.MaxIdle)
	var overMax error
	if m := pool.Spec.Strategy.ScaleStrategy.MaxPods; m != nil && desired > int(*m) {
		overMax = cnResync(opts.PoolOverMaxRequeue, "desired %d pods exceed maxPods %d", desired, *m)
		desired = int(*m)
	}
	pool.Status = mov1.CNPoolStatus{
		TotalPods: int32(inUse + idle), IdlePods: int32(idle), InUsePods: int32(inUse),
		PendingClaims: int32(pending),
	}

	create := max(desired-(inUse+idle), 0)
	var victims []corev1.Pod
	if pending == 0 && inUse+idle > desired {
		cand := append([]corev1.Pod(nil), split.idle...)
		CNPoolDeletionOrder(cand)
		victims = cand[:min(inUse+idle-desired, len(cand))]
	}
	var doomed []corev1.Pod
	for _, p := range split.terminating {
		if p.DeletionTimestamp.IsZero() {
			doomed = append(doomed, p)
		}
	}
	if create == 0 && len(victims) == 0 && len(doomed) == 0 {
		return nil, overMax
	}
	return func(ctx context.Context) error {
		for range create {
			if err := r.createPod(ctx, pool); err != nil {
				return err
			}
		}
		for i := range victims {
			p := victims[i].DeepCopy()
			p.Labels[LabelPhase] = PhaseTerminating
			// Optimistic lock (resourceVersion): a pod a claim took meanwhile is skipped.
			if err := r.Client.Update(ctx, p, client.FieldOwner(FieldOwner)); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					continue
				}
				return err
			}
			doomed = append(doomed, *p)
		}
		for i := range doomed {
			if err := r.Client.Delete(ctx, &doomed[i]); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		return nil
	}, nil
}

// CNPoolPod returns a new pod of pool named name: phase Unknown, labels pool-name, component=CNSet and the
// pool's podLabels, the Pooling annotation, the finalizer matrixorigin.io/cn-draining, the readiness gate
// matrixorigin.io/cn-store, spec.subdomain = the pool's name (so its store UUID is
// hakeeper.StoreUUID(namespace, name, pool)), and the pool as controller owner.
func CNPoolPod(pool *mov1.CNPool, name string) *corev1.Pod {
	labels := maps.Clone(pool.Spec.PodLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelPoolName] = pool.Name
	labels[LabelComponent] = ComponentCN
	labels[LabelPhase] = PhaseUnknown
	image := pool.Spec.Template.Image
	if image == "" {
		image = CNDefaultImage
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: pool.Namespace, Labels: labels,
			Annotations: map[string]string{AnnotationManagementPolicy: ManagementPolicyPooling},
			Finalizers:  []string{FinalizerCNDraining},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool,
				mov1.GroupVersion.WithKind("CNPool"))},
		},
		Spec: corev1.PodSpec{
			Subdomain:      pool.Name,
			Containers:     []corev1.Container{{Name: "main", Image: image}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: PodConditionCNStore}},
		},
	}
}

func (r *CNPoolReconciler) createPod(ctx context.Context, pool *mov1.CNPool) error {
	for range 5 {
		p := CNPoolPod(pool, pool.Name+"-"+utilrand.String(5))
		err := r.Client.Create(ctx, p, client.FieldOwner(FieldOwner))
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		return err
	}
	return fmt.Errorf("create pod of pool %s: names taken", pool.Name)
}

// finalize deletes the pool's pods; done once none is left.
func (r *CNPoolReconciler) finalize(ctx context.Context, pool *mov1.CNPool) (bool, error) {
	pods, err := r.pods(ctx, pool)
	if err != nil {
		return false, err
	}
	for i := range pods {
		if pods[i].DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, &pods[i]); client.IgnoreNotFound(err) != nil {
				return false, err
			}
		}
	}
	return len(pods) == 0, nil
}
