// Package kuberay wires KubeRay's ray-operator (github.com/ray-project/kuberay/ray-operator) into an
// ensemble run: its own, unmodified RayCluster, RayJob and RayService reconcilers, built the way KubeRay's
// main.go builds them with default configuration (no batch scheduler, no metrics, no webhooks).
//
// The version is go.mod's, v1.5.0, or v1.4.0 in the directory v1.4.0/, a module of its own whose other files
// link this one's (make example EXAMPLES=kuberay@v1.4.0). This file is the same at both; the version's own
// wiring (register, FakeRay, Version) is in wiring_v1_5.go here and v1.4.0/wiring_v1_4.go there.
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
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"

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
	set := setup{provider: config}
	for _, o := range opts {
		o(&set)
	}
	rs, err := newReconcilers(ctx, mgr, config, set.provider)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := r.SetupWithManager(mgr, config.ReconcileConcurrency); err != nil {
			return fmt.Errorf("kuberay: %s controller: %w", r.kind, err)
		}
	}
	return nil
}

// reconciler is one of KubeRay's reconcilers, named by the kind it reconciles.
type reconciler struct {
	kind string
	setupWithManager
}

// setupWithManager is what KubeRay's reconcilers have in common at every version: they set themselves up with
// a manager and a reconcile concurrency.
type setupWithManager interface {
	SetupWithManager(mgr manager.Manager, reconcileConcurrency int) error
}

// FakeRay is a utils.ClientProvider that hands KubeRay's reconcilers KubeRay's own fake Ray clients instead
// of HTTP clients of a Ray head. No Ray process runs under ensemble (the data-plane kubelet runs no
// container), so nothing would answer the RayJob controller's dashboard calls (job status, stop) or the
// RayService controller's (Serve application status, config update) and proxy health checks.
type FakeRay struct {
	// Dashboard answers every dashboard call; Dashboard.GetJobInfoMock decides the job status it reports.
	// At v1.4.0, whose reconcilers call InitClient (which writes the client's fields) on each client they
	// get, each call gets a client of its own with Dashboard's mock and Serve statuses.
	Dashboard *utils.FakeRayDashboardClient
	// HTTPProxy answers the proxy actor health checks of RayService head pods.
	HTTPProxy *utils.FakeRayHttpProxyClient
}

// NewFakeRay returns fake Ray clients whose dashboard reports every job as jobStatus and the Serve
// applications apps RUNNING, each with one HEALTHY deployment of its own name, and whose proxy actors are
// healthy.
func NewFakeRay(jobStatus rayv1.JobStatus, apps ...string) *FakeRay {
	d := &utils.FakeRayDashboardClient{}
	info := func(context.Context, string) (*rayJobInfo, error) {
		return &rayJobInfo{JobStatus: jobStatus}, nil
	}
	d.GetJobInfoMock.Store(&info)
	statuses := map[string]*serveApplicationStatus{}
	for _, app := range apps {
		statuses[app] = &serveApplicationStatus{Status: rayv1.ApplicationStatusEnum.RUNNING,
			Deployments: map[string]serveDeploymentStatus{app: {Name: app, Status: rayv1.DeploymentStatusEnum.HEALTHY}}}
	}
	d.SetMultiApplicationStatuses(statuses)
	return &FakeRay{Dashboard: d, HTTPProxy: &utils.FakeRayHttpProxyClient{IsHealthy: true}}
}

var _ utils.ClientProvider = (*FakeRay)(nil)
