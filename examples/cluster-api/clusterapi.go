// Package clusterapi wires Cluster API's core provider (sigs.k8s.io/cluster-api, unmodified, at v1.14.2 in
// this module, or at v1.13.5 in the module of v1.13.5/, which links this file) into an ensemble run: its
// Cluster, Machine, MachineSet, MachineDeployment and MachineHealthCheck reconcilers, the ClusterCache they
// share, its default field indexes, every admission webhook its main.go registers, and its CRD migrator, each
// built as main.go builds them with its default flags. It also holds a fake infrastructure provider
// (fakeinfra.go), the example's own code.
//
// This file is the wiring both versions share. What names a version's setup API (package paths, options,
// reconciler and webhook types, the CRD migrator's UseCache) is in wiring_v1_14.go here and in
// v1.13.5/wiring_v1_13.go.
package clusterapi

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	addonsv1beta1 "sigs.k8s.io/cluster-api/api/addons/v1beta1"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1alpha1 "sigs.k8s.io/cluster-api/api/ipam/v1alpha1"
	ipamv1beta1 "sigs.k8s.io/cluster-api/api/ipam/v1beta1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	runtimev1alpha1 "sigs.k8s.io/cluster-api/api/runtime/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/crdmigrator"
	"sigs.k8s.io/cluster-api/controllers/remote"
	"sigs.k8s.io/cluster-api/feature"

	"github.com/ensembletest/ensemble/suite"
)

// Module is the Go module Cluster API's core provider is imported from.
const Module = "sigs.k8s.io/cluster-api"

// ControllerName is the name main.go gives its manager: its User-Agent and the cache's informers carry it.
const ControllerName = "cluster-api-controller-manager"

// ManagerName is the ensemble manager that runs the core controllers and serves the webhooks;
// CRDMigratorManagerName runs the CRD migrator, ungated (see CRDMigratorManagerOptions).
const (
	ManagerName            = "capi"
	CRDMigratorManagerName = "capi-crdmigrator"
)

// Controllers are the names controller-runtime's builder gives the controllers Setup registers, in
// registration order: the ClusterCache's own, then Cluster, Machine, MachineSet, MachineDeployment and
// MachineHealthCheck.
var Controllers = []string{"clustercache", "cluster", "machine", "machineset", "machinedeployment", "machinehealthcheck"}

// CRDPath returns the directory of the core provider's CRD YAML in the module cache (core/config/crd/bases
// at v1.14.2, config/crd/bases at v1.13.5), as suite.ModuleDir resolves Module from the working directory.
func CRDPath() (string, error) { return moduleFile(configDir, "crd", "bases") }

// WebhookPath returns the core provider's webhook manifests in the module cache (webhook/manifests.yaml
// beside the CRDs' directory), for suite.WebhookOptions.Paths.
func WebhookPath() (string, error) { return moduleFile(configDir, "webhook", "manifests.yaml") }

// moduleFile joins elem to the module directory suite.ModuleDir resolves for Module from the working
// directory. Error: the module cannot be resolved, or it resolves to another version than this binary was
// built against (a test binary run outside the directory of the module it was built in).
func moduleFile(elem ...string) (string, error) {
	dir, err := suite.ModuleDir(Module)
	if err != nil {
		return "", fmt.Errorf("clusterapi: %w", err)
	}
	// A module cache directory is named module@version; a replaced module's local directory is not checked.
	if _, v, ok := strings.Cut(filepath.Base(dir), "@"); ok && v != Version {
		return "", fmt.Errorf("clusterapi: built against %s %s, but go list in the working directory resolves %s: "+
			"run the test in the directory of the module it was built in (examples/cluster-api for v1.14.2, "+
			"examples/cluster-api/v1.13.5 for v1.13.5), whose go.mod requires the version its wiring names", Module, Version, dir)
	}
	return filepath.Join(append([]string{dir}, elem...)...), nil
}

// Scheme returns a scheme holding what main.go's init registers (client-go's kinds, CRDs, storage, and
// cluster-api's core, addons, runtime and IPAM groups in every served version; the same list at both
// versions) and the fake infrastructure provider's kinds.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		storagev1.AddToScheme, clusterv1beta1.AddToScheme, clusterv1.AddToScheme, addonsv1beta1.AddToScheme,
		addonsv1.AddToScheme, runtimev1alpha1.AddToScheme, runtimev1.AddToScheme, ipamv1alpha1.AddToScheme,
		ipamv1beta1.AddToScheme, ipamv1.AddToScheme, addFakeInfra} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("clusterapi: scheme: %w", err)
		}
	}
	return s, nil
}

// main.go's flag defaults that Setup uses (the same at both versions).
const (
	syncPeriod                  = 10 * time.Minute
	remoteConnectionGracePeriod = 50 * time.Second
	remoteConditionsGracePeriod = 5 * time.Minute
	clusterCacheClientQPS       = 20
	clusterCacheClientBurst     = 30
)

// ManagerOptions returns the ensemble manager that runs Setup, with the cache, client and controller options
// main.go hands controller-runtime (Secrets cached only with the cluster-name label, ConfigMaps and Secrets
// read uncached, the priority queue when its feature gate is on, as it is by default) and main.go's
// User-Agent. scheme must come from Scheme.
func ManagerOptions(scheme *runtime.Scheme) suite.ManagerOptions {
	return suite.ManagerOptions{
		Name:       ManagerName,
		UserAgent:  remote.DefaultClusterAPIUserAgent(ControllerName),
		Cache:      managerCacheOptions(scheme),
		Client:     managerClientOptions(),
		Controller: config.Controller{UsePriorityQueue: ptr.To(feature.Gates.Enabled(feature.PriorityQueue))},
		Register:   Setup,
	}
}

func concurrency(c int) controller.Options { return controller.Options{MaxConcurrentReconciles: c} }

// Setup registers what main.go's setupIndexes, setupReconcilers and setupWebhooks register for the core
// controllers, with main.go's default flags: the default indexes, the ClusterCache (its connections end with
// ctx), the Cluster, Machine, MachineSet, MachineDeployment and MachineHealthCheck reconcilers, and every
// webhook. Left out are the reconcilers behind feature gates off by default (ClusterClass, topology,
// ExtensionConfig), MachinePool's and the ClusterResourceSet ones (no spec uses them), and the CRD migrator,
// which CRDMigratorManagerOptions runs. mgr's scheme must come from Scheme.
func Setup(ctx context.Context, mgr manager.Manager) error {
	if err := addDefaultIndexes(ctx, mgr); err != nil {
		return fmt.Errorf("clusterapi: indexes: %w", err)
	}
	secretCachingClient, err := createSecretCachingClient(mgr)
	if err != nil {
		return fmt.Errorf("clusterapi: secret caching client: %w", err)
	}
	clusterCache, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretCachingClient,
		Cache:        clusterCacheCacheOptions(),
		Client:       clusterCacheClientOptions(ControllerName, clusterCacheClientQPS, clusterCacheClientBurst),
	}, concurrency(100))
	if err != nil {
		return fmt.Errorf("clusterapi: ClusterCache: %w", err)
	}
	// The ClusterCache starts the caches of its workload cluster connections on context.Background()
	// (controllers/clustercache/cluster_cache.go:329 at both versions), not on ctx: in production they end with the
	// process. Here the process outlives the manager, and a watch still open keeps kube-apiserver from
	// stopping, so the connections are shut down with the manager through the Shutdown method cluster-api
	// keeps for its own tests (cluster_cache.go:733 at v1.14.2, :725 at v1.13.5).
	if sd, ok := clusterCache.(interface{ Shutdown() }); ok {
		go func() {
			<-ctx.Done()
			sd.Shutdown()
		}()
	}
	for _, r := range reconcilers(ctx, mgr, clusterCache) {
		if err := r.setup(); err != nil {
			return fmt.Errorf("clusterapi: %s controller: %w", r.name, err)
		}
	}
	// main.go hands the converters an apiVersion getter built on internal/contract.GetAPIVersion (the newest
	// version of the group that speaks the provider's contract, from its CRD's labels), which no package
	// outside cluster-api can import; the getter here answers the version the API server prefers for the
	// kind, the same for the fake provider, whose CRDs serve one version.
	setAPIVersionGetter(func(gk schema.GroupKind) (string, error) {
		m, err := mgr.GetRESTMapper().RESTMapping(gk)
		if err != nil {
			return "", err
		}
		return m.GroupVersionKind.GroupVersion().String(), nil
	})
	for _, h := range webhooks(mgr, clusterCache) {
		if err := h.SetupWebhookWithManager(mgr); err != nil {
			return fmt.Errorf("clusterapi: webhook %T: %w", h, err)
		}
	}
	return nil
}

// reconciler is one reconciler's SetupWithManager call, under the name an error gives it.
type reconciler struct {
	name  string
	setup func() error
}

// webhook is what every webhook type of cluster-api's has: its registration with the manager.
type webhook interface{ SetupWebhookWithManager(manager.Manager) error }

// CRDMigratorManagerOptions returns an ungated manager running cluster-api's CRD migrator with the
// configuration main.go gives it (the core kinds it serves with feature gates at their defaults, MachinePool
// included), at concurrency 1. It reconciles CustomResourceDefinitions, which exist from Boot on and no Case
// creates or claims, so a gated manager would refuse every request: it runs ungated and migrates the CRDs
// once, as it does when a provider starts.
func CRDMigratorManagerOptions() suite.ManagerOptions {
	return suite.ManagerOptions{
		Name:      CRDMigratorManagerName,
		UserAgent: remote.DefaultClusterAPIUserAgent(ControllerName),
		Ungated:   true,
		Client:    managerClientOptions(),
		Register: func(ctx context.Context, mgr manager.Manager) error {
			if err := (&crdmigrator.CRDMigrator{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Config: crdMigratorConfig()}).
				SetupWithManager(ctx, mgr, concurrency(1)); err != nil {
				return fmt.Errorf("clusterapi: CRD migrator: %w", err)
			}
			return nil
		},
	}
}

// crdMigratorConfig is main.go's CRD migrator table with feature gates at their defaults (MachinePool on).
// The two versions' tables differ only in UseCache of the core and addons kinds (crdMigratorUseCache, in the
// wiring file); the IPAM kinds are read uncached at both.
func crdMigratorConfig() map[client.Object]crdmigrator.ByObjectConfig {
	cfg := map[client.Object]crdmigrator.ByObjectConfig{
		&addonsv1.ClusterResourceSetBinding{}: {UseCache: crdMigratorUseCache},
		&addonsv1.ClusterResourceSet{}:        {UseCache: crdMigratorUseCache, UseStatusForStorageVersionMigration: true},
		&clusterv1.Cluster{}:                  {UseCache: crdMigratorUseCache, UseStatusForStorageVersionMigration: true},
		&clusterv1.MachineDeployment{}:        {UseCache: crdMigratorUseCache, UseStatusForStorageVersionMigration: true},
		&clusterv1.MachineDrainRule{}:         {UseCache: crdMigratorUseCache},
		&clusterv1.MachineHealthCheck{}:       {UseCache: crdMigratorUseCache, UseStatusForStorageVersionMigration: true},
		&clusterv1.Machine{}:                  {UseCache: crdMigratorUseCache, UseStatusForStorageVersionMigration: true},
		&clusterv1.MachineSet{}:               {UseCache: crdMigratorUseCache, UseStatusForStorageVersionMigration: true},
		&ipamv1.IPAddress{}:                   {UseCache: false},
		&ipamv1.IPAddressClaim{}:              {UseCache: false, UseStatusForStorageVersionMigration: true},
	}
	if feature.Gates.Enabled(feature.MachinePool) {
		cfg[&clusterv1.MachinePool{}] = crdmigrator.ByObjectConfig{UseCache: crdMigratorUseCache, UseStatusForStorageVersionMigration: true}
	}
	return cfg
}
