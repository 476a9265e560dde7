package kuberay_test

import (
	"testing"

	"github.com/ray-project/kuberay/ray-operator/controllers/ray"
)

// TestSubmitterFinishedTimeoutIsKubeRays: the RayJob spec judges convergence at v1.5.0's own bound, which
// v1.4.0 lacks (so the spec cannot read it from there).
func TestSubmitterFinishedTimeoutIsKubeRays(t *testing.T) {
	if submitterFinishedTimeout != ray.DefaultSubmitterFinishedTimeout {
		t.Errorf("submitterFinishedTimeout is %s; KubeRay v1.5.0's DefaultSubmitterFinishedTimeout is %s", submitterFinishedTimeout, ray.DefaultSubmitterFinishedTimeout)
	}
}
