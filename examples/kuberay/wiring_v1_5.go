package kuberay

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	configapi "github.com/ray-project/kuberay/ray-operator/apis/config/v1alpha1"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/batchscheduler"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils/dashboardclient"
	utiltypes "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils/types"
)

// Version is the ray-operator version this module wires in: go.mod's. The module in v1.4.0/ builds its own
// wiring_v1_4.go instead of this file.
const Version = "v1.5.0"

// The dashboard's answers, in utils/types since v1.5.0.
type (
	rayJobInfo             = utiltypes.RayJobInfo
	serveApplicationStatus = utiltypes.ServeApplicationStatus
	serveDeploymentStatus  = utiltypes.ServeDeploymentStatus
)

// newReconcilers builds the three reconcilers as v1.5.0's main.go does, in the order it sets them up: the
// batch scheduler manager is made here and handed to the RayCluster and RayJob reconcilers; the dashboard
// and proxy clients come from provider.
func newReconcilers(ctx context.Context, mgr manager.Manager, config configapi.Configuration, provider utils.ClientProvider) ([]reconciler, error) {
	schedulers, err := batchscheduler.NewSchedulerManager(ctx, config, mgr.GetConfig(), mgr.GetClient())
	if err != nil {
		return nil, fmt.Errorf("kuberay: batch scheduler manager: %w", err)
	}
	schedulers.AddToScheme(mgr.GetScheme())
	clusterOptions := ray.RayClusterReconcilerOptions{
		HeadSidecarContainers:   config.HeadSidecarContainers,
		WorkerSidecarContainers: config.WorkerSidecarContainers,
		// main.go sets utils.GetClusterType(), which probes ctrl.GetConfig() (the ambient kubeconfig, not mgr's
		// API server) for *.openshift.io groups; envtest serves none, so false is what it would find there.
		IsOpenShift:           false,
		BatchSchedulerManager: schedulers,
		DefaultContainerEnvs:  config.DefaultContainerEnvs,
	}
	return []reconciler{
		{"RayCluster", ray.NewReconciler(ctx, mgr, clusterOptions)},
		{"RayService", ray.NewRayServiceReconciler(ctx, mgr, provider)},
		{"RayJob", ray.NewRayJobReconciler(ctx, mgr, ray.RayJobReconcilerOptions{BatchSchedulerManager: schedulers}, provider)},
	}, nil
}

// GetDashboardClient returns f.Dashboard for every RayCluster and URL.
func (f *FakeRay) GetDashboardClient(manager.Manager) func(*rayv1.RayCluster, string) (dashboardclient.RayDashboardClientInterface, error) {
	return func(*rayv1.RayCluster, string) (dashboardclient.RayDashboardClientInterface, error) {
		return f.Dashboard, nil
	}
}

// GetHttpProxyClient returns f.HTTPProxy for every pod.
func (f *FakeRay) GetHttpProxyClient(manager.Manager) func(string, string, string, int) utils.RayHttpProxyClientInterface {
	return func(string, string, string, int) utils.RayHttpProxyClientInterface { return f.HTTPProxy }
}
