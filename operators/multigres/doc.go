// Package multigres is the Multigres reference operator of ensemble: a miniature of the real Multigres operator
// with the same kinds, labels, annotations, finalizers, field owners and reconcile order
// (docs/architecture.md §6), small enough to run every reconciler at once against one envtest API server.
//
// Three controllers, each wired the same way (see ClusterReconciler):
//
//	ClusterReconciler    "multigres-cluster"    MultigresCluster -> TableGroups (server-side apply)
//	TableGroupReconciler "multigres-tablegroup" TableGroup -> Shards (server-side apply)
//	ShardReconciler      "multigres-shard"      Shard -> multiorch and pool pods, status, data plane
//
// Six known defects of the real operator are kept as switches in Options (see the Defect* constants); both
// code paths of each stay in the code, and each defective path behaves defectively against a real API server.
// Every duration is an Option whose default is the real operator's value.
package multigres
