// Package trigger is a controller-runtime source that lets code outside a controller (a fault switch, a query
// method) enqueue reconcile requests without blocking, before or after the controller starts.
package trigger

import (
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Source enqueues requests handed to Enqueue into the queue of the controller that watches it. Requests
// enqueued before the controller starts are kept and delivered at start. Safe for concurrent use. The zero
// value is ready to use; one Source feeds one controller.
type Source struct {
	mu      sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	pending []reconcile.Request
}

var _ source.Source = (*Source)(nil)

// Start implements source.Source: it records the queue and flushes the requests enqueued so far.
func (s *Source) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = q
	for _, r := range s.pending {
		q.Add(r)
	}
	s.pending = nil
	return nil
}

// Enqueue adds the requests to the controller's queue (deduplicated by the queue); it never blocks.
func (s *Source) Enqueue(reqs ...reconcile.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queue == nil {
		s.pending = append(s.pending, reqs...)
		return
	}
	for _, r := range reqs {
		s.queue.Add(r)
	}
}

// String implements fmt.Stringer for controller-runtime's logs.
func (s *Source) String() string { return "trigger" }
