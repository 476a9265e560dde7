// Package matrixone is the MatrixOne reference operator: a miniature of the real MatrixOne operator's
// LogSet, DNSet, ProxySet, CNPool, CNClaim, CNClaimSet and CNStore controllers that reproduces, behind
// switches, the incidents catalogued in pins/ (docs/architecture.md §7). It imports nothing of the
// harness: it is set up with plain SetupWithManager calls, and its defects are Options.
package matrixone

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ensembletest/ensemble/pins"
)

// Defect catalog IDs of the MatrixOne reference operator (docs/architecture.md §8). Each is a switch in Options.Live.
const (
	// DefectUnscopedOperator: the operator ignores WatchNamespace and the isolation rule's leader-election ID:
	// it starts cluster-wide with the shared ID, so a test operator reconciles another namespace's running
	// cluster, prunes its ConfigMap keys and restarts its LogService/DN/Proxy containers in place.
	DefectUnscopedOperator = "MO-UNSCOPED-OPERATOR"
	// DefectConcurrentRollingRestart: every pod-set controller patches all its pods' config suffixes as soon
	// as its ConfigMap changes, so LogSet, DNSet and ProxySet restart together.
	DefectConcurrentRollingRestart = "MO-CONCURRENT-ROLLING-RESTART"
	// DefectClaimDoubleBind: selectCN and the migration target ignore other claims' spec.podName, so two
	// claims end up Bound to one CN pod.
	DefectClaimDoubleBind = "MO-CLAIM-DOUBLE-BIND"
	// DefectClaimBoundToMissingPod: the pod watch maps a pod to claims only by the claimed-by label and Lost
	// does not clear spec.podName, so a claim stays Bound to a deleted pod.
	DefectClaimBoundToMissingPod = "MO-CLAIM-BOUND-TO-MISSING-POD"
	// DefectMigrationStorm: the claim's watch passes every resourceVersion change and progress is written
	// on every pass, so a migrating claim re-triggers itself about once a second.
	DefectMigrationStorm = "MO-MIGRATION-STORM"
	// DefectClaimFinalizeStuck: Finalize skips a pod another claim references without removing its own
	// claimed-by and never returns done, retrying every 2 s forever.
	DefectClaimFinalizeStuck = "MO-CLAIM-FINALIZE-STUCK"
	// DefectClaimStaleStoreStatus: syncBindPod reads the store back from the store cache right after its own
	// PatchCNStore, so a snapshot taken before the patch gives status.store the store without the claim's
	// labels, and a bound claim is not reconciled again once the snapshot is refreshed: its status keeps
	// saying the store has no labels. Found by make explore (a stale LogSet view under load).
	DefectClaimStaleStoreStatus = "MO-CLAIM-STALE-STORE-STATUS"
)

// DefectIDs returns the seven catalog IDs of this operator, in catalog order.
func DefectIDs() []string {
	return []string{DefectUnscopedOperator, DefectConcurrentRollingRestart, DefectClaimDoubleBind,
		DefectClaimBoundToMissingPod, DefectMigrationStorm, DefectClaimFinalizeStuck, DefectClaimStaleStoreStatus}
}

// SharedLeaderElectionID is the real operator's leader-election ID constant, shared by every instance
// that does not follow the isolation rule.
const SharedLeaderElectionID = "0c8ab548.matrixorigin.io"

// DefaultConfigRevision is the revision carried by the operator's config defaults (the "operator version"
// knob): a different revision renders different config, hence a new digest and an in-place restart.
const DefaultConfigRevision = "r1"

// Default durations: the real operator's values.
const (
	// DefaultActionRequeue is the requeue after a successful action (2 s).
	DefaultActionRequeue = 2 * time.Second
	// DefaultConflictRequeue is the requeue after a write conflict (2 s).
	DefaultConflictRequeue = 2 * time.Second
	// DefaultFinalizeRequeue is the requeue of a Finalize that is not done (2 s).
	DefaultFinalizeRequeue = 2 * time.Second
	// DefaultPodSetResync is the resync of a LogSet/DNSet/ProxySet that is not synced (15 s).
	DefaultPodSetResync = 15 * time.Second
	// DefaultPoolOverMaxRequeue is the CNPool requeue when desired pods exceed maxPods (1 min).
	DefaultPoolOverMaxRequeue = time.Minute
	// DefaultClaimNoPoolRequeue is the CNClaim requeue after nominating a pool for a claim with no pod (5 s).
	DefaultClaimNoPoolRequeue = 5 * time.Second
	// DefaultWaitCacheTimeout is how long a claim whose pod is missing waits (from boundTime) before it goes
	// Lost (10 s); DefaultWaitCacheRequeue is the requeue meanwhile (10 s).
	DefaultWaitCacheTimeout = 10 * time.Second
	DefaultWaitCacheRequeue = 10 * time.Second
	// DefaultSyncBindRequeue is the CNClaim requeue after a failed syncBindPod (15 s).
	DefaultSyncBindRequeue = 15 * time.Second
	// DefaultMigrateDelay is how long a migration waits after store.boundTime (15 s); DefaultMigrateRequeue
	// the requeue while the source drains (10 s).
	DefaultMigrateDelay   = 15 * time.Second
	DefaultMigrateRequeue = 10 * time.Second
	// DefaultClaimSetRequeue is the CNClaimSet requeue while its claim count disagrees (1 s).
	DefaultClaimSetRequeue = time.Second
	// DefaultStoreCacheRefresh is the refresh period of the operator's HAKeeper store cache (15 s).
	DefaultStoreCacheRefresh = 15 * time.Second
	// DefaultDrainTimeout bounds a CN drain (the CNPool's reclaimTimeout when unset): past it the pod is
	// Terminating (5 min). DefaultDrainRequeue is the CNStore requeue while draining (5 s);
	// DefaultMinDrainDelay the shortest drain before a pod may go Idle again (5 s).
	DefaultDrainTimeout  = 5 * time.Minute
	DefaultDrainRequeue  = 5 * time.Second
	DefaultMinDrainDelay = 5 * time.Second
	// DefaultStoreResync is the CNStore resync (30 s).
	DefaultStoreResync = 30 * time.Second
)

// Options are the knobs of every controller: defect switches, manager scope, the config revision and every
// duration. A zero duration means its default; Live nil means every defect fixed, so start from
// DefaultOptions for the catalog defaults.
type Options struct {
	// Live maps a catalog ID (Defect* constants) to true when the defective code path runs. Missing = fixed.
	Live map[string]bool
	// WatchNamespace scopes the operator to one namespace (the manager's cache); empty = cluster-wide.
	WatchNamespace string
	// LeaderElectionID is the operator's leader-election Lease name; empty = SharedLeaderElectionID.
	LeaderElectionID string
	// ConfigRevision is the revision of the config defaults; empty = DefaultConfigRevision.
	ConfigRevision string

	// The durations of the real operator, each defaulting to the Default* constant of the same name (zero =
	// default): requeues after an action, a conflict, an unfinished Finalize; the pod-set resync; the pool's
	// over-maxPods requeue; the claim's no-pool requeue, wait-cache timeout and requeue, syncBindPod retry,
	// migration delay and requeue; the claim set's requeue; the HAKeeper store-cache refresh; the CN drain
	// timeout, drain requeue and minimum drain delay; the CNStore resync.
	ActionRequeue, ConflictRequeue, FinalizeRequeue, PodSetResync, PoolOverMaxRequeue time.Duration
	ClaimNoPoolRequeue, WaitCacheTimeout, WaitCacheRequeue, SyncBindRequeue           time.Duration
	MigrateDelay, MigrateRequeue, ClaimSetRequeue, StoreCacheRefresh                  time.Duration
	DrainTimeout, DrainRequeue, MinDrainDelay, StoreResync                            time.Duration

	// Now is the clock for boundTime, drains and the store cache; nil means time.Now.
	Now func() time.Time
}

// DefaultOptions returns each defect in its catalog default state (pins.Default, the one place that says
// which are live) and the real operator's durations.
func DefaultOptions() Options {
	return Options{Live: pins.Default.States("MO-", nil)}.WithDefaults()
}

// IsLive reports whether the defective code path of catalog ID id runs.
func (o Options) IsLive(id string) bool { return o.Live[id] }

// WithDefaults returns o with every zero duration, the revision, the leader-election ID and the clock filled.
func (o Options) WithDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.ActionRequeue, DefaultActionRequeue)
	def(&o.ConflictRequeue, DefaultConflictRequeue)
	def(&o.FinalizeRequeue, DefaultFinalizeRequeue)
	def(&o.PodSetResync, DefaultPodSetResync)
	def(&o.PoolOverMaxRequeue, DefaultPoolOverMaxRequeue)
	def(&o.ClaimNoPoolRequeue, DefaultClaimNoPoolRequeue)
	def(&o.WaitCacheTimeout, DefaultWaitCacheTimeout)
	def(&o.WaitCacheRequeue, DefaultWaitCacheRequeue)
	def(&o.SyncBindRequeue, DefaultSyncBindRequeue)
	def(&o.MigrateDelay, DefaultMigrateDelay)
	def(&o.MigrateRequeue, DefaultMigrateRequeue)
	def(&o.ClaimSetRequeue, DefaultClaimSetRequeue)
	def(&o.StoreCacheRefresh, DefaultStoreCacheRefresh)
	def(&o.DrainTimeout, DefaultDrainTimeout)
	def(&o.DrainRequeue, DefaultDrainRequeue)
	def(&o.MinDrainDelay, DefaultMinDrainDelay)
	def(&o.StoreResync, DefaultStoreResync)
	if o.ConfigRevision == "" {
		o.ConfigRevision = DefaultConfigRevision
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = SharedLeaderElectionID
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Scaled returns o (defaults filled first) with every duration multiplied by factor, e.g. 0.01 to run the
// operator a hundred times faster than real time (docs/architecture.md §5).
func (o Options) Scaled(factor float64) Options {
	o = o.WithDefaults()
	for _, d := range []*time.Duration{&o.ActionRequeue, &o.ConflictRequeue, &o.FinalizeRequeue, &o.PodSetResync,
		&o.PoolOverMaxRequeue, &o.ClaimNoPoolRequeue, &o.WaitCacheTimeout, &o.WaitCacheRequeue, &o.SyncBindRequeue,
		&o.MigrateDelay, &o.MigrateRequeue, &o.ClaimSetRequeue, &o.StoreCacheRefresh, &o.DrainTimeout,
		&o.DrainRequeue, &o.MinDrainDelay, &o.StoreResync} {
		*d = time.Duration(float64(*d) * factor)
	}
	return o
}

// ManagerScope returns the manager settings the operator runs with: the cache scoped to WatchNamespace (all
// namespaces when empty) and LeaderElectionID. With MO-UNSCOPED-OPERATOR live it reproduces the incident's
// test operator: cluster-wide and SharedLeaderElectionID, whatever the options say.
func (o Options) ManagerScope() (cache.Options, string) {
	o = o.WithDefaults()
	if o.IsLive(DefectUnscopedOperator) {
		return cache.Options{}, SharedLeaderElectionID
	}
	c := cache.Options{}
	if o.WatchNamespace != "" {
		c.DefaultNamespaces = map[string]cache.Config{o.WatchNamespace: {}}
	}
	return c, o.LeaderElectionID
}
