package suite

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The convergence oracle waits for a requeue a controller was owed when the namespace last changed: cluster-api
// v1.13.5's Cluster controller answers a MachineDeployment's last status change with a pass that only defers
// itself for about 800 ms, and an end state read before its next pass held the Cluster's stale worker counts.
func TestOwedRequeue(t *testing.T) {
	t0 := time.Now()
	changed := t0.Add(100 * time.Millisecond)
	pass := func(ctrl string, start time.Duration, after time.Duration, err error) *Pass {
		return &Pass{Controller: ctrl, Start: t0.Add(start), End: t0.Add(start + 10*time.Millisecond), RequeueAfter: after, Err: err, scope: "ns"}
	}
	for _, tc := range []struct {
		name string
		last *Pass
		owed bool
		due  time.Time
	}{
		{"began before the change and asked a requeue", pass("cluster", 0, 800*time.Millisecond, nil), true, t0.Add(810 * time.Millisecond)},
		{"began after the change", pass("cluster", 200*time.Millisecond, 800*time.Millisecond, nil), false, time.Time{}},
		{"asked no requeue", pass("cluster", 0, 0, nil), false, time.Time{}},
		{"ended in an error (the retry is waited for apart)", pass("cluster", 0, 800*time.Millisecond, errors.New("x")), false, time.Time{}},
		{"still running", &Pass{Controller: "cluster", Start: t0, scope: "ns", RequeueAfter: time.Second}, false, time.Time{}},
	} {
		r := &recorder{lastPass: map[passKey]*Pass{{controller: tc.last.Controller, req: types.NamespacedName{Namespace: "ns", Name: "c"}}: tc.last}}
		due, owed := r.owedRequeue("ns", changed)
		if owed != tc.owed || !due.Equal(tc.due) {
			t.Errorf("%s: owedRequeue = %v, %v; want %v, %v", tc.name, due, owed, tc.due, tc.owed)
		}
		if _, owed := r.owedRequeue("other", changed); owed {
			t.Errorf("%s: another namespace is owed the requeue", tc.name)
		}
	}
}
