package multigres

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
)

// ClusterReconciler reconciles MultigresClusters (controller "multigres-cluster"): it holds the finalizer
// multigres.com/cluster-cleanup, registers cells and databases in topology, server-side-applies one TableGroup
// per database x table group (field owner multigres-operator, forced, controller owner reference), sends removed
// TableGroups through the pending-deletion handshake, and on deletion deletes its TableGroups and waits for
// them before dropping its finalizer.
//
// Set up like any controller:
//
//	err := (&multigres.ClusterReconciler{Client: mgr.GetClient(), Topo: store, Options: opts}).SetupWithManager(mgr)
type ClusterReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// Topo is the topology store; required (Reconcile returns an error while nil).
	Topo topo.Store
	// Options are the defect switches and durations; zero durations mean their defaults.
	Options Options
}

// SetupWithManager registers the controller "multigres-cluster" with mgr: For(MultigresCluster),
// Owns(TableGroup).
func (r *ClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&mgv1.MultigresCluster{}).
		Owns(&mgv1.TableGroup{}).
		Named(ClusterControllerName).
		Complete(r)
}

// Reconcile brings one MultigresCluster one step closer to its spec. Errors from the API server or topology
// (other than topo.ErrUnavailable, which becomes a requeue) are returned.
func (r *ClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	opts := r.Options.withDefaults()
	logger := log.FromContext(ctx)

	cluster := &mgv1.MultigresCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	owned, err := r.ownedTableGroups(ctx, cluster)
	if err != nil {
		return ctrl.Result{}, err
	}

	if !cluster.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, cluster, owned, opts)
	}
	if err := ensureFinalizer(ctx, r.Client, cluster, FinalizerClusterCleanup, FieldOwnerOperator); err != nil {
		return ctrl.Result{}, err
	}

	var result ctrl.Result
	if r.Topo == nil {
		return ctrl.Result{}, errors.New("ClusterReconciler.Topo is nil")
	}
	if err := r.register(ctx, cluster); errors.Is(err, topo.ErrUnavailable) {
		logger.Info("topology unavailable; requeue", "after", opts.TopologyUnavailableRequeue)
		result.RequeueAfter = opts.TopologyUnavailableRequeue
	} else if err != nil {
		return ctrl.Result{}, err
	}

	desired := DesiredTableGroups(cluster)
	want := map[string]bool{}
	for _, tg := range desired {
		want[tg.Name] = true
		if err := applySpec(ctx, r.Client, tg, gvkTableGroup, FieldOwnerOperator); err != nil {
			return ctrl.Result{}, fmt.Errorf("apply tablegroup %s: %w", tg.Name, err)
		}
	}

	if result, err = r.retireTableGroups(ctx, owned, want, result, opts); err != nil {
		return ctrl.Result{}, err
	}

	st := clusterStatus(cluster, desired, owned)
	m, err := toMap(&st)
	if err != nil {
		return ctrl.Result{}, err
	}
	u := statusPayload(gvkCluster, cluster.Namespace, cluster.Name, m)
	if err := applyStatus(ctx, r.Client, u, FieldOwnerOperator); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return result, nil
}

// finalize handles a cluster being deleted: it deletes the owned TableGroups not yet being deleted, requeues
// after DrainRequeue while any remain, and then removes the cluster's finalizer.
func (r *ClusterReconciler) finalize(ctx context.Context, cluster *mgv1.MultigresCluster, owned []mgv1.TableGroup,
	opts Options) (ctrl.Result, error) {
	for i := range owned {
		tg := &owned[i]
		if tg.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, tg); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("delete tablegroup %s: %w", tg.Name, err)
			}
		}
	}
	if len(owned) > 0 {
		return ctrl.Result{RequeueAfter: opts.DrainRequeue}, nil
	}
	return ctrl.Result{}, removeFinalizer(ctx, r.Client, cluster, FinalizerClusterCleanup, FieldOwnerOperator)
}

// retireTableGroups sends the owned TableGroups the cluster no longer wants through the pending-deletion
// handshake. It returns result with RequeueAfter lowered to PendingDeletionRequeue when any is retiring.
func (r *ClusterReconciler) retireTableGroups(ctx context.Context, owned []mgv1.TableGroup, want map[string]bool,
	result ctrl.Result, opts Options) (ctrl.Result, error) {
	for i := range owned {
		tg := &owned[i]
		if want[tg.Name] || !tg.DeletionTimestamp.IsZero() {
			continue
		}
		// Pending-deletion handshake: annotate, wait for ReadyForDeletion, then delete.
		result = minRequeue(result, opts.PendingDeletionRequeue)
		if !pendingDeletion(tg) {
			if err := markPendingDeletion(ctx, r.Client, tg, FieldOwnerOperator); err != nil {
				return ctrl.Result{}, err
			}
			continue
		}
		if readyForDeletion(tg.Status.Conditions) {
			if err := r.Client.Delete(ctx, tg); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("delete tablegroup %s: %w", tg.Name, err)
			}
		}
	}
	return result, nil
}

// clusterStatus computes the cluster's status from its desired and owned TableGroups: Healthy when every
// desired TableGroup is Healthy on its current generation and none other is owned, else Progressing.
func clusterStatus(cluster *mgv1.MultigresCluster, desired []*mgv1.TableGroup,
	owned []mgv1.TableGroup) mgv1.MultigresClusterStatus {
	byName := map[string]*mgv1.TableGroup{}
	for i := range owned {
		byName[owned[i].Name] = &owned[i]
	}
	st := mgv1.MultigresClusterStatus{ObservedGeneration: cluster.Generation, TotalTableGroups: int32(len(desired))}
	for _, d := range desired {
		if tg := byName[d.Name]; tg != nil && tg.Status.ObservedGeneration == tg.Generation &&
			tg.Status.Phase == mgv1.PhaseHealthy {
			st.ReadyTableGroups++
		}
	}
	st.Phase = mgv1.PhaseProgressing
	if st.ReadyTableGroups == st.TotalTableGroups && len(owned) == len(desired) {
		st.Phase = mgv1.PhaseHealthy
	}
	return st
}

// register records the cluster's cells and databases in topology (idempotent, every pass).
func (r *ClusterReconciler) register(ctx context.Context, cluster *mgv1.MultigresCluster) error {
	for _, cell := range cluster.Spec.Cells {
		if err := r.Topo.RegisterCell(ctx, cluster.Namespace, cell); err != nil {
			return fmt.Errorf("register cell %s: %w", cell, err)
		}
	}
	for _, db := range cluster.Spec.Databases {
		if err := r.Topo.RegisterDatabase(ctx, cluster.Namespace, db.Name); err != nil {
			return fmt.Errorf("register database %s: %w", db.Name, err)
		}
	}
	return nil
}

// ownedTableGroups lists the TableGroups in the cluster's namespace labelled with its name and controlled by it.
func (r *ClusterReconciler) ownedTableGroups(ctx context.Context, cluster *mgv1.MultigresCluster) ([]mgv1.TableGroup, error) {
	list := &mgv1.TableGroupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{LabelCluster: cluster.Name}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, tg := range list.Items {
		if ownedBy(&tg, cluster) {
			out = append(out, tg)
		}
	}
	return out, nil
}

// DesiredTableGroups returns the TableGroups cluster asks for (one per database x table group), as they are
// applied: name TableGroupName(cluster, database, tableGroup), labels cluster/database/tablegroup, a controller
// owner reference to cluster, spec with the shards resolved. Status is empty.
func DesiredTableGroups(cluster *mgv1.MultigresCluster) []*mgv1.TableGroup {
	var out []*mgv1.TableGroup
	for _, db := range cluster.Spec.Databases {
		for _, tgt := range db.TableGroups {
			out = append(out, &mgv1.TableGroup{
				ObjectMeta: metav1.ObjectMeta{
					Name:      TableGroupName(cluster.Name, db.Name, tgt.Name),
					Namespace: cluster.Namespace,
					Labels: map[string]string{
						LabelCluster: cluster.Name, LabelDatabase: db.Name, LabelTableGroup: tgt.Name,
					},
					OwnerReferences: []metav1.OwnerReference{controllerRef(cluster, gvkCluster)},
				},
				Spec: mgv1.TableGroupSpec{
					DatabaseName:   db.Name,
					TableGroupName: tgt.Name,
					Shards:         tgt.Shards,
				},
			})
		}
	}
	return out
}

// readyForDeletion reports whether conds hold ReadyForDeletion=True.
func readyForDeletion(conds []metav1.Condition) bool {
	for _, c := range conds {
		if c.Type == mgv1.ConditionReadyForDeletion {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// minRequeue returns res with RequeueAfter lowered to d (or set to d when unset).
func minRequeue(res ctrl.Result, d time.Duration) ctrl.Result {
	if d > 0 && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
		res.RequeueAfter = d
	}
	return res
}
