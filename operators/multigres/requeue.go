package multigres

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// unconvergedRequeue is the requeue of a shard that has been unconverged for elapsed: elapsed clamped to
// [lo, hi], plus jitter*rnd of that (rnd in [0,1)), so the result lies in [lo, hi*(1+jitter)).
func unconvergedRequeue(elapsed, lo, hi time.Duration, jitter, rnd float64) time.Duration {
	d := min(max(elapsed, lo), hi)
	return d + time.Duration(float64(d)*jitter*rnd)
}

// unconvergedTracker remembers when each shard was first seen unconverged. The zero value is ready to use;
// it is safe for concurrent use.
type unconvergedTracker struct {
	mu    sync.Mutex
	first map[types.NamespacedName]time.Time
}

// delay returns the requeue for key under opts, starting its timer at opts.Now() when it is not running.
func (t *unconvergedTracker) delay(key types.NamespacedName, opts Options) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := opts.Now()
	if t.first == nil {
		t.first = map[types.NamespacedName]time.Time{}
	}
	first, ok := t.first[key]
	if !ok {
		first = now
		t.first[key] = now
	}
	return unconvergedRequeue(now.Sub(first), opts.UnconvergedRequeueMin, opts.UnconvergedRequeueMax,
		opts.UnconvergedJitter, opts.Rand())
}

// reset stops the timer of key (the shard converged or is gone).
func (t *unconvergedTracker) reset(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.first, key)
}
