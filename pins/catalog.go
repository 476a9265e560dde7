package pins

// Default is ensemble's catalog: the defects the two reference operators reproduce (docs/architecture.md §8,
// §6 and §7 for where each lives). Change an entry's Default only when an issue says so.
var Default = Catalog{
	{
		ID:      "MG-STATUS-SSA-ZERO-FIELDS",
		Title:   "StorageClass guard applies a typed status literal; its zero orchReady/poolsReady are claimed with force: status flips forever",
		Source:  "two server-side-apply field managers rewrote one Shard's status ten times a second, forever",
		Default: Fixed,
		Specs:   []string{"multigres a healthy shard is quiescent for 1 s, its fields owned by the declared field managers", "multigres ownership two reconcilers write one Shard: the TableGroup controller its spec, the Shard controller its status, each field under the field owner the design gives it"},
		Retire:  "never while the typed-literal guard path exists in the operator",
	},
	{
		ID:      "MG-STORAGECLASS-SPLIT-WRITERS",
		Title:   "backup and pool StorageClass checks each write StorageClassValid with their own message",
		Source:  "the StorageClassValid condition alternated between two messages written by two checks",
		Default: Fixed,
		Specs:   []string{"multigres StorageClassValid has one writer: with the backup and the pool class missing its message is stable", "multigres a healthy shard is quiescent for 1 s, its fields owned by the declared field managers", "multigres pins MG-STORAGECLASS-SPLIT-WRITERS: backup class present, pool class missing: StorageClassValid alternates between the checks' messages, yet each pass leaves it False (up to 4 s: 40 passes)"},
		Retire:  "when the guard has a single writer in the real operator and the switch is removed",
		// Fixed in the shared manager, so no spec meets it by chance; the pin keeps it live in a multigres
		// instance of its own, where a spec can state what a pass leaves while both checks write (issue 21).
		OwnInstanceLive: true,
	},
	{
		ID:      "MG-CONDITION-MAP-ORDER",
		Title:   "pools visited in map order: the StorageClassValid message names missing classes in varying order and flaps",
		Source:  "with two pools whose StorageClasses were missing, the condition message changed on every pass",
		Default: Live,
		Specs:   []string{"multigres pins MG-CONDITION-MAP-ORDER: the StorageClassValid message over a window with two missing classes"},
		Retire:  "when the operator sorts pool names; replace the pin with a positive assertion that the message is stable",
	},
	{
		ID:      "MG-UNNAMED-FIELD-OWNER",
		Title:   "status/pod patches without a field owner: the API server names one from the User-Agent, two managers co-own podRoles",
		Source:  "podRoles entries owned by both multigres-resource-handler and a manager named after the User-Agent",
		Default: Fixed,
		Specs:   []string{"multigres a healthy shard is quiescent for 1 s, its fields owned by the declared field managers", "multigres ownership two reconcilers write one Shard: the TableGroup controller its spec, the Shard controller its status, each field under the field owner the design gives it"},
		Retire:  "when every patch names its field owner in the real operator",
	},
	{
		ID:      "MG-NO-REQUEUE-UNCONVERGED",
		Title:   "a not-converged shard asks for no requeue: pods never Ready; a late pooler's role never lands in podRoles",
		Source:  "a shard that had not converged asked for no requeue, so pool pods never went Ready",
		Default: Fixed,
		Specs:   []string{"multigres a pool scaled 2 -> 3 while pooler registrations are held: the late pooler's role lands in podRoles"},
		Retire:  "when the real operator requeues while unconverged in every release",
	},
	{
		ID:      "MG-MULTIORCH-COUNTED-AS-POOL",
		Title:   "pod lists not scoped to component=shard-pool: the multiorch pod counts as a never-ready pool pod",
		Source:  "the multiorch pod carries the pool's identity labels and was counted as an unregistered pool pod",
		Default: Fixed,
		Specs:   []string{"multigres a cluster of one shard and a pool of 2 becomes Healthy with one PRIMARY and both pool pods Ready"},
		Retire:  "when pod selectors include the component label in the real operator",
	},
	{
		ID:      "MG-PRUNE-ON-STALE-PODS",
		Title:   "poolers of pods missing from the cached pod list are shut down: a pod the cache has not seen yet loses its live pooler and never gets a role",
		Source:  "under load a new pool pod's pooler registered before the shard controller's cache saw the pod; it was set SERVING -> SHUTDOWN and the shard stayed PoolsReady=false",
		Default: Fixed,
		Specs:   []string{"multigres pins MG-PRUNE-ON-STALE-PODS: a pool scaled 2 -> 3 with the new pod held from the shard controller's cache while its pooler registers"},
		Retire:  "when the operator confirms a pod is gone with an uncached read before shutting down its pooler; replace the pin with a positive assertion that the pod gets its role",
		// Live by default it was met by chance by specs other than its pin (about one full run in 8) under
		// load; fixed in the shared manager (issue 16), the pin keeps it live in a multigres instance of its own.
		OwnInstanceLive: true,
	},
	{
		ID:      "MO-UNSCOPED-OPERATOR",
		Title:   "a second operator starts cluster-wide with a shared leader-election ID and reconciles another namespace's cluster",
		Source:  "a test operator reconciled an unrelated cluster, pruned its ConfigMap keys and restarted LogService/DN/Proxy in place, dropping a client connection",
		Default: Fixed,
		Specs:   []string{"matrixone sentinel isolation: a second operator scoped to its own namespace leaves the sentinel cluster alone", "AfterSuite: the sentinel cluster is unchanged"},
		Retire:  "never: the isolation rule is permanent",
	},
	{
		ID:      "MO-CONCURRENT-ROLLING-RESTART",
		Title:   "a defaults change restarts LogSet, DNSet and ProxySet pods at the same time instead of one component after another",
		Source:  "an operator upgrade restarted every component of a cluster at once",
		Default: Live,
		Specs:   []string{"matrixone rolling restart order: a config revision change restarts LogSet, DNSet and ProxySet pods one component after another"},
		Retire:  "when restarts are ordered LogSet, DNSet, ProxySet; replace the pin with a positive assertion",
	},
	{
		ID:      "MO-CLAIM-DOUBLE-BIND",
		Title:   "selectCN and the migration target ignore other claims' spec.podName: two claims Bound to one pod",
		Source:  "two CNClaims were Bound to the same CN pod in production",
		Default: Live,
		Specs:   []string{"matrixone CNClaim CNClaim double binding: the incident replayed with the migrator never puts two live claims on one pod"},
		Retire:  "when selectCN and the migrator skip pods other live claims reference",
	},
	{
		ID:      "MO-CLAIM-BOUND-TO-MISSING-POD",
		Title:   "pod watch maps to claims only by label; a claim stays Bound to a deleted pod",
		Source:  "a claim stayed Bound to a pod that no longer existed",
		Default: Live,
		Specs:   []string{"matrixone CNClaim claim bound to a deleted pod: the claim goes Lost with spec.podName cleared and its claim set replaces it"},
		Retire:  "when the claim goes Lost and clears spec.podName within the cache timeout",
	},
	{
		ID:      "MO-MIGRATION-STORM",
		Title:   "the claim re-triggers on its own status writes: migration retries about once a second",
		Source:  "a migrating claim retried every second",
		Default: Live,
		Specs:   []string{"matrixone CNClaim migration storm: a migrating claim's reconcile passes over 20 s of the operator's time"},
		Retire:  "when progress writes happen only on change and own status writes do not re-trigger the claim",
	},
	{
		ID:      "MO-CLAIM-FINALIZE-STUCK",
		Title:   "Finalize skips a pod another claim references and never returns done",
		Source:  "a deleted claim retried its finalizer every 2 s forever",
		Default: Fixed,
		Specs:   []string{"matrixone CNClaim deleting a claim whose pod another claim uses: the deletion completes and the pod stays the other claim's"},
		Retire:  "when Finalize removes its own claimed-by and returns done",
	},
	{
		ID:      "MO-CLAIM-STALE-STORE-STATUS",
		Title:   "a bound claim's status.store is read from a store-cache snapshot older than its own PatchCNStore",
		Source:  "make explore: under a stale LogSet view a Bound claim's status.store.labels stayed empty while HAKeeper's store had the claim's labels",
		Default: Fixed,
		Specs:   []string{"matrixone CNClaim pins MO-CLAIM-STALE-STORE-STATUS: a claim bound right after its pod's admission reports its store without the labels it gave it"},
		Retire:  "when status.store shows the labels and work state the bind's PatchCNStore set",
		// Live in the shared manager it was met by chance under load: both unperturbed runs of "a CNPool keeps
		// in-use + pending + maxIdle pods" in a 500-point explore sweep ended with the labels missing, so the
		// differential oracle failed 13 of that spec's points whose runs were the correct ones (issue 16's
		// rule: a live defect is met only where it is meant to be). The pin keeps it live in its own instance.
		OwnInstanceLive: true,
	},
}
