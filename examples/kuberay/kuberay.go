// Package kuberay wires KubeRay's ray-operator (github.com/ray-project/kuberay/ray-operator v1.5.0) into an
// ensemble run: its own, unmodified RayCluster, RayJob and RayService reconcilers, built the way KubeRay's
// main.go builds them with default configuration (no batch scheduler, no metrics, no webhooks).
package kuberay

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	configapi "github.com/ray-project/kuberay/ray-operator/apis/config/v1alpha1"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/batchscheduler"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils/dashboardclient"
	utiltypes "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils/types"

	"github.com/ensembletest/ensemble/suite"
)

// Module is the Go module KubeRay's operator is imported from.
const Module = "github.com/ray-project/kuberay/ray-operator"

// CRDDir is the directory, relative to Module's root, holding the ray.io CRD YAML
// (ray.io_rayclusters.yaml, ray.io_rayjobs.yaml, ray.io_rayservices.yaml).
const CRDDir = "config/crd/bases"

// CRDPath returns the absolute path of CRDDir in the module cache, as suite.ModuleDir (`go list -m`)
// resolves Module from the current directory (which must be inside this module, as it is under `go test`).
func CRDPath() (string, error) {
	dir, err := suite.ModuleDir(Module)
	if err != nil {
		return "", fmt.Errorf("kuberay: %w", err)
	}
	return filepath.Join(dir, CRDDir), nil
}

// Scheme returns a scheme holding client-go's kinds and KubeRay's ray.io/v1 kinds.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := rayv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Option changes how Setup builds the reconcilers.
type Option func(*setup)

type setup struct{ provider utils.ClientProvider }

// WithClientProvider hands the RayJob and RayService reconcilers p for their Ray dashboard and HTTP proxy
// clients, where main.go hands them its configapi.Configuration (real HTTP clients of the Ray head).
func WithClientProvider(p utils.ClientProvider) Option { return func(s *setup) { s.provider = p } }

// Setup registers KubeRay's RayCluster, RayService and RayJob controllers with mgr, as ray-operator/main.go
// does with no flags and no config file. mgr's scheme must come from Scheme; call Setup once per manager,
// before mgr starts. KubeRay's NewReconciler panics when it cannot add its Pod field index (e.g. the API
// server is unreachable for the REST mapping); Setup returns that panic as an error.
func Setup(ctx context.Context, mgr manager.Manager, opts ...Option) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("kuberay: RayCluster reconciler: %v", p)
		}
	}()
	var config configapi.Configuration
	configapi.SetDefaults_Configuration(&config) // the flag defaults: ReconcileConcurrency 1, no batch scheduler
	schedulers, err := batchscheduler.NewSchedulerManager(ctx, config, mgr.GetConfig(), mgr.GetClient())
	if err != nil {
		return fmt.Errorf("kuberay: batch scheduler manager: %w", err)
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
	if err := ray.NewReconciler(ctx, mgr, clusterOptions).SetupWithManager(mgr, config.ReconcileConcurrency); err != nil {
		return fmt.Errorf("kuberay: RayCluster controller: %w", err)
	}
	set := setup{provider: config}
	for _, o := range opts {
		o(&set)
	}
	if err := ray.NewRayServiceReconciler(ctx, mgr, set.provider).SetupWithManager(mgr, config.ReconcileConcurrency); err != nil {
		return fmt.Errorf("kuberay: RayService controller: %w", err)
	}
	jobOptions := ray.RayJobReconcilerOptions{BatchSchedulerManager: schedulers}
	if err := ray.NewRayJobReconciler(ctx, mgr, jobOptions, set.provider).SetupWithManager(mgr, config.ReconcileConcurrency); err != nil {
		return fmt.Errorf("kuberay: RayJob controller: %w", err)
	}
	return nil
}

// FakeRay is a utils.ClientProvider that hands KubeRay's reconcilers KubeRay's own fake Ray clients instead
// of HTTP clients of a Ray head. No Ray process runs under ensemble (the data-plane kubelet runs no
// container), so nothing would answer the RayJob controller's dashboard calls (job status, stop) or the
// RayService controller's (Serve application status, config update) and proxy health checks.
type FakeRay struct {
	// Dashboard answers every dashboard call; Dashboard.GetJobInfoMock decides the job status it reports.
	Dashboard *utils.FakeRayDashboardClient
	// HTTPProxy answers the proxy actor health checks of RayService head pods.
	HTTPProxy *utils.FakeRayHttpProxyClient
}

// NewFakeRay returns fake Ray clients whose dashboard reports every job as jobStatus and the Serve
// applications apps RUNNING, each with one HEALTHY deployment of its own name, and whose proxy actors are
// healthy.
func NewFakeRay(jobStatus rayv1.JobStatus, apps ...string) *FakeRay {
	d := &utils.FakeRayDashboardClient{}
	info := func(context.Context, string) (*utiltypes.RayJobInfo, error) {
		return &utiltypes.RayJobInfo{JobStatus: jobStatus}, nil
	}
	d.GetJobInfoMock.Store(&info)
	statuses := map[string]*utiltypes.ServeApplicationStatus{}
	for _, app := range apps {
		statuses[app] = &utiltypes.ServeApplicationStatus{Status: rayv1.ApplicationStatusEnum.RUNNING,
			Deployments: map[string]utiltypes.ServeDeploymentStatus{app: {Name: app, Status: rayv1.DeploymentStatusEnum.HEALTHY}}}
	}
	d.SetMultiApplicationStatuses(statuses)
	return &FakeRay{Dashboard: d, HTTPProxy: &utils.FakeRayHttpProxyClient{IsHealthy: true}}
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

var _ utils.ClientProvider = (*FakeRay)(nil)
