package multigres

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Controller names, as passed to the builder's Named and used by the harness to label writes and passes.
const (
	// ClusterControllerName names the ClusterReconciler.
	ClusterControllerName = "multigres-cluster"
	// TableGroupControllerName names the TableGroupReconciler.
	TableGroupControllerName = "multigres-tablegroup"
	// ShardControllerName names the ShardReconciler.
	ShardControllerName = "multigres-shard"
)

// Field owners (server-side apply managers and fieldManager of every other write).
const (
	// FieldOwnerOperator: Cluster and TableGroup controllers (TableGroup and Shard fan-out, their status,
	// finalizers and pending-deletion annotations).
	FieldOwnerOperator = "multigres-operator"
	// FieldOwnerResourceHandler: Shard controller (updateStatus, podRoles patch, pods, finalizer, drain).
	FieldOwnerResourceHandler = "multigres-resource-handler"
	// FieldOwnerGuard: the StorageClass guard; owns only the StorageClassValid condition (when fixed).
	FieldOwnerGuard = "multigres-resource-handler-guard"
	// FieldOwnerReadiness: the PoolerDataReady pod condition (pods/status).
	FieldOwnerReadiness = "multigres-resource-handler-readiness"
)

// FieldOwners returns every field owner this operator declares, for ownership assertions (a manager not in
// this set, e.g. one named after a User-Agent, is a defect).
func FieldOwners() []string {
	return []string{FieldOwnerOperator, FieldOwnerResourceHandler, FieldOwnerGuard, FieldOwnerReadiness}
}

// Finalizers and annotations.
const (
	// FinalizerClusterCleanup is held by MultigresClusters (until their TableGroups are gone) and by
	// TableGroups (until their Shards are gone), which gives the deletion order shard -> tablegroup -> cluster.
	FinalizerClusterCleanup = "multigres.com/cluster-cleanup"
	// FinalizerShardPVCOrphan is held by Shards until their pods are gone.
	FinalizerShardPVCOrphan = "multigres.com/shard-pvc-orphan"
	// AnnotationPendingDeletion ("true") marks a TableGroup or Shard its parent no longer wants; the parent
	// deletes it once its ReadyForDeletion condition is True.
	AnnotationPendingDeletion = "multigres.com/pending-deletion"
	// AnnotationDrainState is the drain state of a pod: DrainRequested -> DrainDraining -> DrainAcknowledged
	// -> DrainReadyForDeletion, one step per Shard pass; the pod is deleted at DrainReadyForDeletion.
	AnnotationDrainState = "drain.multigres.com/state"
)

// Drain states (values of AnnotationDrainState).
const (
	// DrainRequested is set on a pod the shard no longer wants (scale-down or pending deletion).
	DrainRequested = "requested"
	// DrainDraining is the first step taken by the data plane.
	DrainDraining = "draining"
	// DrainAcknowledged follows once the pod's pooler is set SHUTDOWN in topology.
	DrainAcknowledged = "acknowledged"
	// DrainReadyForDeletion is the last state; the next pass deletes the pod.
	DrainReadyForDeletion = "ready-for-deletion"
)

// Labels. Pool and multiorch pods both carry cluster, database, tablegroup, shard and cell; pool pods also pool.
const (
	// LabelCluster holds the MultigresCluster object name (TableGroups, Shards, pods).
	LabelCluster = "multigres.com/cluster"
	// LabelDatabase holds the database name (TableGroups, Shards, pods).
	LabelDatabase = "multigres.com/database"
	// LabelTableGroup holds the table group name, not the object name (TableGroups, Shards, pods).
	LabelTableGroup = "multigres.com/tablegroup"
	// LabelShard holds the shard name (spec.shardName), not the object name (Shards, pods).
	LabelShard = "multigres.com/shard"
	// LabelPool holds the pool name (pool pods only).
	LabelPool = "multigres.com/pool"
	// LabelCell holds the cell name (pods).
	LabelCell = "multigres.com/cell"
	// LabelComponent is app.kubernetes.io/component: ComponentShardPool or ComponentMultiorch.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentShardPool marks pool pods.
	ComponentShardPool = "shard-pool"
	// ComponentMultiorch marks multiorch pods.
	ComponentMultiorch = "multiorch"
)

// PodConditionPoolerDataReady is the readiness gate of every pool pod; the Shard controller sets the pod
// condition from the pooler's posture in topology (field owner FieldOwnerReadiness).
const PodConditionPoolerDataReady corev1.PodConditionType = "PoolerDataReady"

// TableGroupName is the object name of the TableGroup of database x tableGroup in cluster:
// "<cluster>-<database>-<tableGroup>".
func TableGroupName(cluster, database, tableGroup string) string {
	return fmt.Sprintf("%s-%s-%s", cluster, database, tableGroup)
}

// ShardName is the object name of shard in the TableGroup object tableGroupObject: "<tableGroupObject>-<shard>".
func ShardName(tableGroupObject, shard string) string {
	return fmt.Sprintf("%s-%s", tableGroupObject, shard)
}

// PoolPodName is the name of pool pod index (0-based) of pool in cell of the Shard object shardObject:
// "<shard>-pool-<pool>-<cell>-<index>".
func PoolPodName(shardObject, pool, cell string, index int) string {
	return fmt.Sprintf("%s-pool-%s-%s-%d", shardObject, pool, cell, index)
}

// MultiorchPodName is the name of the multiorch pod of cell of the Shard object shardObject:
// "<shard>-multiorch-<cell>".
func MultiorchPodName(shardObject, cell string) string {
	return fmt.Sprintf("%s-multiorch-%s", shardObject, cell)
}

// sortedKeys returns the keys of m in ascending order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
