package suite

import "sync"

// gate decides which reconcile requests reach the real reconcilers of gated managers: only those that
// belong to a Case that admitted its namespace (a namespaced request by its namespace, a cluster-scoped one
// by the Case that claimed an object of its name: see scopes). Refused requests are recorded as gated
// passes. Safe for concurrent use.
type gate struct {
	mu   sync.RWMutex
	open map[string]int
}

func newGate() *gate { return &gate{open: map[string]int{}} }

// admit lets requests in namespace ns through; admissions nest (each admit needs its close).
func (g *gate) admit(ns string) {
	g.mu.Lock()
	g.open[ns]++
	g.mu.Unlock()
}

// close undoes one admit of ns; once every admit is undone, ns is refused again.
func (g *gate) close(ns string) {
	g.mu.Lock()
	if g.open[ns] <= 1 {
		delete(g.open, ns)
	} else {
		g.open[ns]--
	}
	g.mu.Unlock()
}

// admitted reports whether requests that belong to the Case of namespace ns pass the gate ("" never does).
func (g *gate) admitted(ns string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.open[ns] > 0
}
