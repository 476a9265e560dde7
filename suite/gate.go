package suite

import (
	"sort"
	"sync"
)

// Gate decides which reconcile requests reach the real reconcilers of gated managers: only those whose
// namespace a Case admitted. A request for a cluster-scoped object (empty namespace) passes only after
// AdmitClusterScoped. Refused requests are recorded as gated passes. Safe for concurrent use.
type Gate struct {
	mu       sync.RWMutex
	admitted map[string]int
}

func newGate() *Gate { return &Gate{admitted: map[string]int{}} }

// Admit lets requests in namespace ns through; admissions nest (each Admit needs its Close).
func (g *Gate) Admit(ns string) {
	g.mu.Lock()
	g.admitted[ns]++
	g.mu.Unlock()
}

// AdmitClusterScoped lets requests for cluster-scoped objects through, until CloseClusterScoped.
func (g *Gate) AdmitClusterScoped() { g.Admit("") }

// CloseClusterScoped undoes one AdmitClusterScoped.
func (g *Gate) CloseClusterScoped() { g.Close("") }

// Close undoes one Admit of ns; once every Admit is undone, ns is refused again.
func (g *Gate) Close(ns string) {
	g.mu.Lock()
	if g.admitted[ns] <= 1 {
		delete(g.admitted, ns)
	} else {
		g.admitted[ns]--
	}
	g.mu.Unlock()
}

// Admitted reports whether requests in namespace ns pass the gate.
func (g *Gate) Admitted(ns string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.admitted[ns] > 0
}

// Namespaces lists the admitted namespaces, sorted ("" stands for cluster-scoped objects).
func (g *Gate) Namespaces() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []string
	for ns := range g.admitted {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}
