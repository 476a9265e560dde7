package multigres

import (
	"math/rand/v2"
	"time"

	"github.com/ensembletest/ensemble/pins"
)

// Defect catalog IDs of the Multigres reference operator (docs/architecture.md §8). Each is a switch in Options.Live.
const (
	// DefectStatusSSAZeroFields: the StorageClass guard applies a typed Shard status literal with force, so its
	// zero orchReady/poolsReady are serialised and taken from updateStatus, which takes them back next pass:
	// the status flips forever.
	DefectStatusSSAZeroFields = "MG-STATUS-SSA-ZERO-FIELDS"
	// DefectStorageClassSplitWriters: the backup and the pool StorageClass checks each write StorageClassValid
	// with their own message, so the condition flaps every pass.
	DefectStorageClassSplitWriters = "MG-STORAGECLASS-SPLIT-WRITERS"
	// DefectConditionMapOrder: pools are visited in Go map order, so with two missing classes the
	// StorageClassValid message names them in varying order and the condition flaps.
	DefectConditionMapOrder = "MG-CONDITION-MAP-ORDER"
	// DefectUnnamedFieldOwner: the podRoles status patch and the pod readiness-gate patch carry no field owner,
	// so the API server names the manager after the User-Agent and podRoles entries get two owners.
	DefectUnnamedFieldOwner = "MG-UNNAMED-FIELD-OWNER"
	// DefectNoRequeueUnconverged: a not-converged Shard asks for no requeue; topology changes emit no
	// Kubernetes event, so pool pods stay not Ready and a late pooler's role never lands in podRoles.
	DefectNoRequeueUnconverged = "MG-NO-REQUEUE-UNCONVERGED"
	// DefectMultiorchCountedAsPool: the status and data-plane pod lists select only the identity labels, not
	// component=shard-pool, so the multiorch pod counts as a pool pod that never registers.
	DefectMultiorchCountedAsPool = "MG-MULTIORCH-COUNTED-AS-POOL"
	// DefectPruneOnStalePods: the data plane shuts down the pooler of every pod missing from the cached pod
	// list, so a pod the cache has not seen yet counts as gone and its live pooler is set SHUTDOWN.
	DefectPruneOnStalePods = "MG-PRUNE-ON-STALE-PODS"
)

// DefectIDs returns the seven catalog IDs of this operator, in catalog order.
func DefectIDs() []string {
	return []string{DefectStatusSSAZeroFields, DefectStorageClassSplitWriters, DefectConditionMapOrder,
		DefectUnnamedFieldOwner, DefectNoRequeueUnconverged, DefectMultiorchCountedAsPool, DefectPruneOnStalePods}
}

// Default durations: the real operator's values.
const (
	// DefaultStorageClassRequeue is the requeue after a missing StorageClass.
	DefaultStorageClassRequeue = 10 * time.Second
	// DefaultTopologyUnavailableRequeue is the requeue when topology answers ErrUnavailable.
	DefaultTopologyUnavailableRequeue = 5 * time.Second
	// DefaultPendingDeletionRequeue is the parent's requeue while a child goes through the pending-deletion
	// handshake.
	DefaultPendingDeletionRequeue = 5 * time.Second
	// DefaultDrainRequeue is the requeue while pods drain or are being deleted (Shard), and while a deleting
	// parent waits for its children.
	DefaultDrainRequeue = 2 * time.Second
	// DefaultUnconvergedRequeueMin is the lower clamp of the unconverged-shard requeue.
	DefaultUnconvergedRequeueMin = 5 * time.Second
	// DefaultUnconvergedRequeueMax is the upper clamp of the unconverged-shard requeue.
	DefaultUnconvergedRequeueMax = 60 * time.Second
	// DefaultUnconvergedJitter is the largest upward jitter of the unconverged-shard requeue, as a fraction.
	DefaultUnconvergedJitter = 0.2
)

// Options are the knobs of the three controllers: defect switches and every duration. The zero value of a
// duration (or of UnconvergedJitter) means its default; Live nil means every defect fixed, so start from
// DefaultOptions to get the catalog defaults.
type Options struct {
	// Live maps a catalog ID (Defect* constants) to true when the defective code path runs. Missing = fixed.
	Live map[string]bool

	// StorageClassRequeue is the requeue after a missing StorageClass (default 10 s).
	StorageClassRequeue time.Duration
	// TopologyUnavailableRequeue is the requeue when topology is unreachable (default 5 s).
	TopologyUnavailableRequeue time.Duration
	// PendingDeletionRequeue is the parent's requeue during the pending-deletion handshake (default 5 s).
	PendingDeletionRequeue time.Duration
	// DrainRequeue is the requeue while pods drain or children are deleted (default 2 s).
	DrainRequeue time.Duration
	// UnconvergedRequeueMin and UnconvergedRequeueMax clamp the unconverged-shard requeue, which is the time
	// since the shard was first seen unconverged (defaults 5 s and 60 s).
	UnconvergedRequeueMin, UnconvergedRequeueMax time.Duration
	// UnconvergedJitter is the largest upward jitter as a fraction of the clamped delay (default 0.2; a
	// negative value means none).
	UnconvergedJitter float64

	// Now is the clock for the unconverged timer and condition transition times; nil means time.Now.
	Now func() time.Time
	// Rand returns a number in [0,1) for the jitter; nil means math/rand/v2.Float64. Must be goroutine-safe.
	Rand func() float64
}

// DefaultOptions returns each defect in its catalog default state (pins.Default, the one place that says
// which are live) and the real operator's durations.
func DefaultOptions() Options {
	return Options{
		Live:                       pins.Default.States("MG-", nil),
		StorageClassRequeue:        DefaultStorageClassRequeue,
		TopologyUnavailableRequeue: DefaultTopologyUnavailableRequeue,
		PendingDeletionRequeue:     DefaultPendingDeletionRequeue,
		DrainRequeue:               DefaultDrainRequeue,
		UnconvergedRequeueMin:      DefaultUnconvergedRequeueMin,
		UnconvergedRequeueMax:      DefaultUnconvergedRequeueMax,
		UnconvergedJitter:          DefaultUnconvergedJitter,
	}
}

// IsLive reports whether the defective code path of catalog ID id runs.
func (o Options) IsLive(id string) bool { return o.Live[id] }

// WithDefect returns a copy of o with defect id set live (true) or fixed (false); o.Live is not modified.
func (o Options) WithDefect(id string, live bool) Options {
	m := make(map[string]bool, len(o.Live)+1)
	for k, v := range o.Live {
		m[k] = v
	}
	m[id] = live
	o.Live = m
	return o
}

// Scaled returns a copy of o with every duration (defaults filled in first) multiplied by factor, e.g. 0.01 to
// run the operator a hundred times faster than real time. The jitter fraction is unchanged.
func (o Options) Scaled(factor float64) Options {
	o = o.withDefaults()
	s := func(d time.Duration) time.Duration { return time.Duration(float64(d) * factor) }
	o.StorageClassRequeue = s(o.StorageClassRequeue)
	o.TopologyUnavailableRequeue = s(o.TopologyUnavailableRequeue)
	o.PendingDeletionRequeue = s(o.PendingDeletionRequeue)
	o.DrainRequeue = s(o.DrainRequeue)
	o.UnconvergedRequeueMin = s(o.UnconvergedRequeueMin)
	o.UnconvergedRequeueMax = s(o.UnconvergedRequeueMax)
	return o
}

// withDefaults fills zero durations, the jitter, the clock and the random source.
func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.StorageClassRequeue, DefaultStorageClassRequeue)
	def(&o.TopologyUnavailableRequeue, DefaultTopologyUnavailableRequeue)
	def(&o.PendingDeletionRequeue, DefaultPendingDeletionRequeue)
	def(&o.DrainRequeue, DefaultDrainRequeue)
	def(&o.UnconvergedRequeueMin, DefaultUnconvergedRequeueMin)
	def(&o.UnconvergedRequeueMax, DefaultUnconvergedRequeueMax)
	if o.UnconvergedRequeueMax < o.UnconvergedRequeueMin {
		o.UnconvergedRequeueMax = o.UnconvergedRequeueMin
	}
	switch {
	case o.UnconvergedJitter == 0:
		o.UnconvergedJitter = DefaultUnconvergedJitter
	case o.UnconvergedJitter < 0:
		o.UnconvergedJitter = 0
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return o
}
