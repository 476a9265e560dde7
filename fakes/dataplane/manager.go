package dataplane

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ensembletest/ensemble/suite"
)

// ManagerName is the name of the manager ManagerOptions describes; the kubelet's writes and passes are
// attributed to it.
const ManagerName = "dataplane"

// ManagerOptions returns the suite.ManagerOptions that run d's kubelet ungated in a manager named
// "dataplane": it acts in every namespace, as a real kubelet would.
func (d *DataPlane) ManagerOptions() suite.ManagerOptions {
	return suite.ManagerOptions{Name: ManagerName, Ungated: true, Register: func(_ context.Context, mgr manager.Manager) error {
		return d.SetupWithManager(mgr)
	}}
}
