// Package topo is the topology seam of the Multigres reference operator: the global/cell topology that the real
// operator reaches through etcd (cells, databases, poolers). The operator only consumes this interface;
// fakes/pooler implements it in memory. Topology writes emit no Kubernetes event, which is why the Shard
// controller must requeue while it is not converged (MG-NO-REQUEUE-UNCONVERGED).
package topo

import (
	"context"
	"errors"
)

// ErrUnavailable is returned (possibly wrapped; test with errors.Is) by every Store method while the
// topology is unreachable. The Shard controller answers it with a requeue (5 s by default).
var ErrUnavailable = errors.New("topology unavailable")

// Pooler roles as reported by topology.
const (
	// RolePrimary is the elected primary of a shard.
	RolePrimary = "PRIMARY"
	// RoleReplica is a replica of a shard.
	RoleReplica = "REPLICA"
	// RoleQuarantined is a pooler taken out of service by multiorch.
	RoleQuarantined = "QUARANTINED"
)

// Pooler lifecycles.
const (
	// LifecycleServing is a pooler in service.
	LifecycleServing = "SERVING"
	// LifecycleShutdown is a pooler the operator pruned (its pod is gone) or drained.
	LifecycleShutdown = "SHUTDOWN"
)

// ShardKey identifies a shard in topology by the spec names (Shard.spec.databaseName, tableGroupName,
// shardName), not by Kubernetes object names.
type ShardKey struct{ Database, TableGroup, Shard string } // the three names

// Pooler is one pooler record (one per pool pod) as the operator sees it.
type Pooler struct {
	Name, Cell, Hostname string   // Hostname = pool pod name
	Key                  ShardKey // the shard the pooler serves
	Role                 string   // "PRIMARY" | "REPLICA" | "QUARANTINED" | "" (unknown, before election)
	Lifecycle            string   // "SERVING" | "SHUTDOWN"

	// Posture: a pool pod is ready for traffic (PoolerDataReady) when its pooler is registered and all four hold.
	Initialized, AcceptingConnections, CohortEligible, InCommittedCohort bool
}

// Store is the topology as used by the operator. Every method is keyed by the Kubernetes namespace of the
// cluster (one topology per namespace) and must be safe for concurrent use.
type Store interface {
	// RegisterCell records a cell; idempotent.
	RegisterCell(ctx context.Context, namespace, cell string) error
	// RegisterDatabase records a database; idempotent.
	RegisterDatabase(ctx context.Context, namespace, database string) error
	// Poolers lists the poolers of one shard (any lifecycle). ErrUnavailable when faulted.
	Poolers(ctx context.Context, namespace string, key ShardKey) ([]Pooler, error)
	// SetLifecycle sets a pooler's lifecycle (the operator uses LifecycleShutdown to prune).
	SetLifecycle(ctx context.Context, namespace, pooler, lifecycle string) error
}
