package kuberay

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	configapi "github.com/ray-project/kuberay/ray-operator/apis/config/v1alpha1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
)

// Version is the ray-operator version this module wires in: its go.mod's. The example's own directory
// builds wiring_v1_5.go instead of this file; the other files are links to the example's.
const Version = "v1.4.0"

// The dashboard's answers, in utils at v1.4.0.
type (
	rayJobInfo             = utils.RayJobInfo
	serveApplicationStatus = utils.ServeApplicationStatus
	serveDeploymentStatus  = utils.ServeDeploymentStatus
)

// newReconcilers builds the three reconcilers as v1.4.0's main.go does, in the order it sets them up: the
// RayCluster reconciler makes its own batch scheduler manager from config (NewReconciler takes config), and
// the RayJob reconciler has none; the dashboard and proxy clients come from provider.
func newReconcilers(ctx context.Context, mgr manager.Manager, config configapi.Configuration, provider utils.ClientProvider) ([]reconciler, error) {
	clusterOptions := ray.RayClusterReconcilerOptions{
		HeadSidecarContainers:   config.HeadSidecarContainers,
		WorkerSidecarContainers: config.WorkerSidecarContainers,
		// main.go sets utils.GetClusterType(), which probes ctrl.GetConfig() (the ambient kubeconfig, not mgr's
		// API server) for *.openshift.io groups; envtest serves none, so false is what it would find there.
		IsOpenShift: false,
	}
	return []reconciler{
		{"RayCluster", ray.NewReconciler(ctx, mgr, clusterOptions, config)},
		{"RayService", ray.NewRayServiceReconciler(ctx, mgr, provider)},
		{"RayJob", ray.NewRayJobReconciler(ctx, mgr, ray.RayJobReconcilerOptions{}, provider)},
	}, nil
}

// GetDashboardClient returns a func that makes a new fake dashboard client with f.Dashboard's job status
// mock and Serve application statuses for each call: v1.4.0's reconcilers call InitClient on it, which
// writes its fields, and the RayJob and RayService reconcilers run at once.
func (f *FakeRay) GetDashboardClient(manager.Manager) func() utils.RayDashboardClientInterface {
	return func() utils.RayDashboardClientInterface {
		d := &utils.FakeRayDashboardClient{}
		d.GetJobInfoMock.Store(f.Dashboard.GetJobInfoMock.Load())
		statuses, _ := f.Dashboard.GetMultiApplicationStatus(context.Background()) // the fake's map, never an error
		d.SetMultiApplicationStatuses(statuses)
		return d
	}
}

// GetHttpProxyClient returns f.HTTPProxy for every pod (its InitClient and SetHostIp do nothing).
func (f *FakeRay) GetHttpProxyClient(manager.Manager) func() utils.RayHttpProxyClientInterface {
	return func() utils.RayHttpProxyClientInterface { return f.HTTPProxy }
}
