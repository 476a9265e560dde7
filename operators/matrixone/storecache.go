package matrixone

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

// StoreCache is the operator's cache of HAKeeper CN stores, as the real operator's HAKeeper client keeps
// one: a snapshot of GetClusterDetails per LogSet instance, refreshed every Refresh (15 s by default), so
// a store registered (or changed) since the last refresh is not seen until the next one. A lookup that
// misses returns an error wrapping hakeeper.ErrNotInCache ("store not found in cache").
//
// The refresh is done on lookup, by the caller, once the snapshot is Refresh old (no goroutine): the
// snapshot a lookup sees is never older than Refresh, exactly as with a periodic refresher. One StoreCache
// is meant to be shared by CNClaimReconciler and CNStoreReconciler. The zero value refreshes every
// DefaultStoreCacheRefresh on the wall clock. Safe for concurrent use.
type StoreCache struct {
	refresh time.Duration
	now     func() time.Time

	mu    sync.Mutex
	snaps map[string]*storeSnapshot
}

type storeSnapshot struct {
	mu     sync.Mutex
	at     time.Time
	stores map[string]hakeeper.CNStore
}

// NewStoreCache returns an empty cache refreshed every opts.StoreCacheRefresh (its default when zero),
// on opts.Now's clock.
func NewStoreCache(opts Options) *StoreCache {
	opts = opts.WithDefaults()
	return &StoreCache{refresh: opts.StoreCacheRefresh, now: opts.Now, snaps: map[string]*storeSnapshot{}}
}

// Get returns the store uuid of LogSet namespace/logSet from the snapshot, refreshing it through hk first
// when it is Refresh old (or was never taken). Errors: GetClusterDetails' error (the old snapshot is kept),
// or hakeeper.ErrNotInCache (wrapped) when the snapshot has no such store.
func (c *StoreCache) Get(ctx context.Context, hk hakeeper.Client, namespace, logSet, uuid string) (
	hakeeper.CNStore, error) {
	s := c.snapshot(namespace, logSet)
	s.mu.Lock()
	defer s.mu.Unlock()
	now, refresh := time.Now(), c.refresh
	if c.now != nil {
		now = c.now()
	}
	if refresh <= 0 {
		refresh = DefaultStoreCacheRefresh
	}
	if s.at.IsZero() || now.Sub(s.at) >= refresh {
		d, err := hk.GetClusterDetails(ctx)
		if err != nil {
			return hakeeper.CNStore{}, fmt.Errorf("refresh store cache of %s/%s: %w", namespace, logSet, err)
		}
		s.stores = make(map[string]hakeeper.CNStore, len(d.CNStores))
		for _, st := range d.CNStores {
			s.stores[st.UUID] = st
		}
		s.at = now
	}
	st, ok := s.stores[uuid]
	if !ok {
		return hakeeper.CNStore{}, fmt.Errorf("store %s: %w", uuid, hakeeper.ErrNotInCache)
	}
	return st, nil
}

// Invalidate drops the snapshot of LogSet namespace/logSet: the next Get refreshes it.
func (c *StoreCache) Invalidate(namespace, logSet string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.snaps, namespace+"/"+logSet)
}

func (c *StoreCache) snapshot(namespace, logSet string) *storeSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snaps == nil {
		c.snaps = map[string]*storeSnapshot{}
	}
	k := namespace + "/" + logSet
	s := c.snaps[k]
	if s == nil {
		s = &storeSnapshot{}
		c.snaps[k] = s
	}
	return s
}
