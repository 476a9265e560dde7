package multigres

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
)

// TableGroupReconciler reconciles TableGroups (controller "multigres-tablegroup"): it holds the finalizer
// multigres.com/cluster-cleanup, server-side-applies each desired Shard (field owner multigres-operator, forced,
// controller owner reference), marks undesired Shards pending-deletion and deletes them once their
// ReadyForDeletion is True (requeue 5 s meanwhile), and counts a Shard ready only once its observedGeneration
// caught up. A TableGroup that is itself pending deletion wants no Shards and reports ReadyForDeletion=True when
// none is left. Being deleted, it deletes its Shards and drops its finalizer once they are gone.
type TableGroupReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// Options are the defect switches and durations; zero durations mean their defaults.
	Options Options
}

// SetupWithManager registers the controller "multigres-tablegroup" with mgr: For(TableGroup),
// Owns(Shard).
func (r *TableGroupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&mgv1.TableGroup{}).
		Owns(&mgv1.Shard{}).
		Named(TableGroupControllerName).
		Complete(r)
}

// Reconcile brings one TableGroup one step closer to its spec; API errors are returned.
func (r *TableGroupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	opts := r.Options.withDefaults()
	tg := &mgv1.TableGroup{}
	if err := r.Client.Get(ctx, req.NamespacedName, tg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	owned, err := r.ownedShards(ctx, tg)
	if err != nil {
		return ctrl.Result{}, err
	}

	if !tg.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, tg, owned, opts)
	}
	if err := ensureFinalizer(ctx, r.Client, tg, FinalizerClusterCleanup, FieldOwnerOperator); err != nil {
		return ctrl.Result{}, err
	}

	var desired []*mgv1.Shard
	if !pendingDeletion(tg) {
		desired = DesiredShards(tg)
	}
	want := map[string]bool{}
	for _, s := range desired {
		want[s.Name] = true
		if err := applySpec(ctx, r.Client, s, gvkShard, FieldOwnerOperator); err != nil {
			return ctrl.Result{}, fmt.Errorf("apply shard %s: %w", s.Name, err)
		}
	}

	result, err := r.retireShards(ctx, owned, want, opts)
	if err != nil {
		return ctrl.Result{}, err
	}

	st := tableGroupStatus(tg, desired, owned, opts)
	m, err := toMap(&st)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := applyStatus(ctx, r.Client, statusPayload(gvkTableGroup, tg.Namespace, tg.Name, m),
		FieldOwnerOperator); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return result, nil
}

// finalize handles a TableGroup being deleted: it deletes the owned Shards not yet being deleted, requeues
// after DrainRequeue while any remain, and then removes the TableGroup's finalizer.
func (r *TableGroupReconciler) finalize(ctx context.Context, tg *mgv1.TableGroup, owned []mgv1.Shard,
	opts Options) (ctrl.Result, error) {
	for i := range owned {
		s := &owned[i]
		if s.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("delete shard %s: %w", s.Name, err)
			}
		}
	}
	if len(owned) > 0 {
		return ctrl.Result{RequeueAfter: opts.DrainRequeue}, nil
	}
	return ctrl.Result{}, removeFinalizer(ctx, r.Client, tg, FinalizerClusterCleanup, FieldOwnerOperator)
}

// retireShards marks the owned Shards the TableGroup no longer wants pending deletion, and deletes those whose
// ReadyForDeletion is True. It returns a requeue after PendingDeletionRequeue when any is retiring.
func (r *TableGroupReconciler) retireShards(ctx context.Context, owned []mgv1.Shard, want map[string]bool,
	opts Options) (ctrl.Result, error) {
	var result ctrl.Result
	for i := range owned {
		s := &owned[i]
		if want[s.Name] || !s.DeletionTimestamp.IsZero() {
			continue
		}
		result = minRequeue(result, opts.PendingDeletionRequeue)
		if !pendingDeletion(s) {
			if err := markPendingDeletion(ctx, r.Client, s, FieldOwnerOperator); err != nil {
				return ctrl.Result{}, err
			}
			continue
		}
		if readyForDeletion(s.Status.Conditions) {
			if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("delete shard %s: %w", s.Name, err)
			}
		}
	}
	return result, nil
}

// tableGroupStatus computes the TableGroup's status from its desired and owned Shards: Healthy when every
// desired Shard is Healthy on its current generation and none other is owned, else Progressing; with the
// ReadyForDeletion condition while the TableGroup is pending deletion.
func tableGroupStatus(tg *mgv1.TableGroup, desired []*mgv1.Shard, owned []mgv1.Shard,
	opts Options) mgv1.TableGroupStatus {
	byName := map[string]*mgv1.Shard{}
	for i := range owned {
		byName[owned[i].Name] = &owned[i]
	}
	st := mgv1.TableGroupStatus{ObservedGeneration: tg.Generation, TotalShards: int32(len(desired))}
	for _, d := range desired {
		if s := byName[d.Name]; s != nil && s.Status.ObservedGeneration == s.Generation &&
			s.Status.Phase == mgv1.PhaseHealthy {
			st.ReadyShards++
		}
	}
	st.Phase = mgv1.PhaseProgressing
	if st.ReadyShards == st.TotalShards && len(owned) == len(desired) {
		st.Phase = mgv1.PhaseHealthy
	}
	if pendingDeletion(tg) {
		c := metav1.Condition{Type: mgv1.ConditionReadyForDeletion, Status: metav1.ConditionFalse,
			Reason: "ShardsRemaining", Message: fmt.Sprintf("%d shard(s) left", len(owned)),
			ObservedGeneration: tg.Generation}
		if len(owned) == 0 {
			c.Status, c.Reason, c.Message = metav1.ConditionTrue, "NoShardsLeft", "no shard left"
		}
		st.Conditions = []metav1.Condition{carryCondition(tg.Status.Conditions, c, metav1.NewTime(opts.Now()))}
	}
	return st
}

// ownedShards lists the Shards in the TableGroup's namespace labelled with its database and table group and
// controlled by it.
func (r *TableGroupReconciler) ownedShards(ctx context.Context, tg *mgv1.TableGroup) ([]mgv1.Shard, error) {
	list := &mgv1.ShardList{}
	if err := r.Client.List(ctx, list, client.InNamespace(tg.Namespace), client.MatchingLabels{
		LabelDatabase: tg.Spec.DatabaseName, LabelTableGroup: tg.Spec.TableGroupName,
	}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, s := range list.Items {
		if ownedBy(&s, tg) {
			out = append(out, s)
		}
	}
	return out, nil
}

// DesiredShards returns the Shards tg asks for, as they are applied: name ShardName(tg.Name, shard), labels
// cluster (copied from tg)/database/tablegroup/shard, a controller owner reference to tg, the resolved spec.
func DesiredShards(tg *mgv1.TableGroup) []*mgv1.Shard {
	var out []*mgv1.Shard
	for _, t := range tg.Spec.Shards {
		labels := map[string]string{
			LabelDatabase: tg.Spec.DatabaseName, LabelTableGroup: tg.Spec.TableGroupName, LabelShard: t.Name,
		}
		if c := tg.Labels[LabelCluster]; c != "" {
			labels[LabelCluster] = c
		}
		out = append(out, &mgv1.Shard{
			ObjectMeta: metav1.ObjectMeta{
				Name:            ShardName(tg.Name, t.Name),
				Namespace:       tg.Namespace,
				Labels:          labels,
				OwnerReferences: []metav1.OwnerReference{controllerRef(tg, gvkTableGroup)},
			},
			Spec: mgv1.ShardSpec{
				DatabaseName:       tg.Spec.DatabaseName,
				TableGroupName:     tg.Spec.TableGroupName,
				ShardName:          t.Name,
				Multiorch:          t.Multiorch,
				BackupStorageClass: t.BackupStorageClass,
				Pools:              t.Pools,
			},
		})
	}
	return out
}
