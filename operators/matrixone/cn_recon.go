package matrixone

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

// The reconcile framework of the CN controllers (CNPool, CNClaim, CNClaimSet), as in the real operator
// (docs/architecture.md §7 Reconcile framework):
//
//  1. fetch; being deleted: Finalize; not done -> requeue FinalizeRequeue (forever); done -> drop the
//     finalizer matrixorigin.io/<controller-name>;
//  2. add that finalizer before any work;
//  3. Observe: it computes the whole status in the object and returns an action or nothing;
//  4. the whole status is written with an Update (skipped when Observe left it unchanged, unless the
//     controller forces the write: MO-MIGRATION-STORM live);
//  5. the action runs; requeue ActionRequeue after it.
//
// Errors: a cnResync error requeues after its asked delay without an error (the real ErrReSync); a write
// conflict requeues after ConflictRequeue; any other error is returned (controller-runtime's back-off).

// cnAction is the work an Observe asks for.
type cnAction func(ctx context.Context) error

// cnResyncError asks the framework to requeue after a delay: not a failure (the real recon.ErrReSync).
type cnResyncError struct {
	reason string
	after  time.Duration
}

// Error implements error.
func (e *cnResyncError) Error() string { return fmt.Sprintf("resync after %s: %s", e.after, e.reason) }

// cnResync returns a cnResyncError asking for a requeue after d.
func cnResync(d time.Duration, format string, args ...any) error {
	return &cnResyncError{reason: fmt.Sprintf(format, args...), after: d}
}

// cnResult maps an error of a pass to the framework's result: resync -> its delay, conflict ->
// ConflictRequeue, nil -> nothing, anything else returned.
func cnResult(err error, opts Options) (ctrl.Result, error) {
	var rs *cnResyncError
	switch {
	case err == nil:
		return ctrl.Result{}, nil
	case errors.As(err, &rs):
		return ctrl.Result{RequeueAfter: rs.after}, nil
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: opts.ConflictRequeue}, nil
	}
	return ctrl.Result{}, err
}

// cnFrame runs one pass of the framework over objects of type T.
type cnFrame[T client.Object] struct {
	c         client.Client
	opts      Options
	finalizer string
	newObj    func() T
	// status returns a deep copy of the object's status, for change detection.
	status func(T) any
	// observe computes the whole status into the object and returns an action or nothing.
	observe func(ctx context.Context, obj T) (cnAction, error)
	// finalize cleans up a deleted object; false means not done (requeue FinalizeRequeue).
	finalize func(ctx context.Context, obj T) (bool, error)
	// forceStatus, when not nil and true for the object after observe, writes the status even unchanged.
	forceStatus func(obj T) bool

	// baseline is the status as last read or written in this pass.
	baseline any
}

// writeStatus writes the object's whole status now (an Update of the status subresource) when it changed,
// for an observe that must persist its status before a later write of the same pass; the framework's own
// write after observe is then skipped unless the status changed again.
func (f *cnFrame[T]) writeStatus(ctx context.Context, obj T) error {
	if equality.Semantic.DeepEqual(f.baseline, f.status(obj)) {
		return nil
	}
	if err := f.c.Status().Update(ctx, obj, client.FieldOwner(FieldOwner)); err != nil {
		return err
	}
	f.baseline = f.status(obj)
	return nil
}

func (f *cnFrame[T]) reconcile(ctx context.Context, key types.NamespacedName) (ctrl.Result, error) {
	if f.c == nil {
		return ctrl.Result{}, errCNNilClient
	}
	obj := f.newObj()
	if err := f.c.Get(ctx, key, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		if !controllerutil.ContainsFinalizer(obj, f.finalizer) {
			return ctrl.Result{}, nil
		}
		done, err := f.finalize(ctx, obj)
		if err != nil {
			return cnResult(err, f.opts)
		}
		if !done {
			return ctrl.Result{RequeueAfter: f.opts.FinalizeRequeue}, nil
		}
		controllerutil.RemoveFinalizer(obj, f.finalizer)
		return cnResult(client.IgnoreNotFound(f.c.Update(ctx, obj, client.FieldOwner(FieldOwner))), f.opts)
	}
	if !controllerutil.ContainsFinalizer(obj, f.finalizer) {
		controllerutil.AddFinalizer(obj, f.finalizer)
		if err := f.c.Update(ctx, obj, client.FieldOwner(FieldOwner)); err != nil {
			return cnResult(err, f.opts)
		}
	}
	f.baseline = f.status(obj)
	act, obsErr := f.observe(ctx, obj)
	if !equality.Semantic.DeepEqual(f.baseline, f.status(obj)) || (f.forceStatus != nil && f.forceStatus(obj)) {
		if err := f.c.Status().Update(ctx, obj, client.FieldOwner(FieldOwner)); err != nil {
			return cnResult(client.IgnoreNotFound(err), f.opts)
		}
	}
	if obsErr != nil {
		return cnResult(obsErr, f.opts)
	}
	if act == nil {
		return ctrl.Result{}, nil
	}
	if err := act(ctx); err != nil {
		return cnResult(err, f.opts)
	}
	return ctrl.Result{RequeueAfter: f.opts.ActionRequeue}, nil
}

// cnDefaultFilter is the framework's default For() filter: generation, label or annotation changes, and
// the start of a deletion; creates and deletes pass.
func cnDefaultFilter() predicate.Predicate {
	return predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{},
		predicate.AnnotationChangedPredicate{}, cnDeletionStarted())
}

// cnDeletionStarted passes updates that set the deletion timestamp.
func cnDeletionStarted() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld != nil && e.ObjectNew != nil &&
				e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}

// cnIsCNPod reports whether obj is a CN pod (label matrixorigin.io/component=CNSet).
func cnIsCNPod(obj client.Object) bool { return obj.GetLabels()[LabelComponent] == ComponentCN }

// CNStoreUUID is the HAKeeper store UUID of a CN pod: hakeeper.StoreUUID of its namespace, name and
// spec.subdomain.
func CNStoreUUID(pod *corev1.Pod) string {
	return hakeeper.StoreUUID(pod.Namespace, pod.Name, pod.Spec.Subdomain)
}

// cnInstance resolves the HAKeeper instance serving the pool poolName in namespace ns: the instance of the
// pool's spec.deps.logSet. A LogSet with no instance (not Ready) is a resync after PodSetResync.
func cnInstance(ctx context.Context, c client.Client, reg hakeeper.Registry, opts Options, ns, poolName string) (
	hakeeper.Client, string, error) {
	if reg == nil {
		return nil, "", errors.New("matrixone: reconciler has no HAKeeper registry")
	}
	if poolName == "" {
		return nil, "", fmt.Errorf("matrixone: pod has no %s label", LabelPoolName)
	}
	pool := &mov1.CNPool{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: poolName}, pool); err != nil {
		return nil, "", fmt.Errorf("get pool %s: %w", poolName, err)
	}
	logSet := pool.Spec.Deps.LogSet
	hk, err := reg.Instance(ctx, ns, logSet)
	if errors.Is(err, hakeeper.ErrNoInstance) {
		return nil, logSet, cnResync(opts.PodSetResync, "logset %s is not ready", logSet)
	}
	if err != nil {
		return nil, logSet, err
	}
	return hk, logSet, nil
}

// cnLabelsFromAPI converts claim labels to HAKeeper labels, sorted by key.
func cnLabelsFromAPI(in []mov1.CNLabel) []hakeeper.Label {
	var out []hakeeper.Label
	for _, l := range in {
		out = append(out, hakeeper.Label{Key: l.Key, Values: append([]string(nil), l.Values...)})
	}
	cnSortLabels(out)
	return out
}

// cnLabelsToAPI converts HAKeeper labels to claim labels, sorted by key.
func cnLabelsToAPI(in []hakeeper.Label) []mov1.CNLabel {
	cp := append([]hakeeper.Label(nil), in...)
	cnSortLabels(cp)
	var out []mov1.CNLabel
	for _, l := range cp {
		out = append(out, mov1.CNLabel{Key: l.Key, Values: append([]string(nil), l.Values...)})
	}
	return out
}

func cnSortLabels(ls []hakeeper.Label) {
	slices.SortStableFunc(ls, func(a, b hakeeper.Label) int { return strings.Compare(a.Key, b.Key) })
}

// errCNNilClient is returned by a CN controller's Reconcile before setup gave it a client.
var errCNNilClient = errors.New("matrixone: CN reconciler has no Client (set it, or call SetupWithManager)")
