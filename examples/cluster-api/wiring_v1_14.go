// The wiring of cluster-api v1.14.2, which go.mod requires: its main.go is core/main.go, and the setup
// helpers, reconcilers and webhooks it calls are exported from core/setup, core/reconcilers/* and
// core/webhooks/*. The module in v1.13.5/ shares every other file of this directory and has a wiring file
// of its own instead of this one.

package clusterapi

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	"sigs.k8s.io/cluster-api/core/reconcilers/machine"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	"sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	"sigs.k8s.io/cluster-api/core/setup"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"
	"sigs.k8s.io/cluster-api/core/webhooks/conversion"
	"sigs.k8s.io/cluster-api/util/index"
)

// Version is the version of cluster-api this file wires, the one its module's go.mod requires
// (TestVersionIsTheResolvedModule checks that they agree).
const Version = "v1.14.2"

// crdMigratorUseCache is the UseCache of the core and addons kinds in main.go's CRD migrator table
// (crdMigratorConfig): v1.14 reads every kind uncached.
const crdMigratorUseCache = false

// configDir is where the module keeps its CRDs (crd/bases) and webhook manifests (webhook/manifests.yaml).
const configDir = "core/config"

// The setup helpers core/main.go calls, exported from core/setup and util/index.
var (
	addDefaultIndexes         = index.AddDefaultIndexes
	createSecretCachingClient = setup.CreateSecretCachingClient
	managerClientOptions      = setup.ManagerClientOptions
	clusterCacheCacheOptions  = setup.ClusterCacheCacheOptions
	clusterCacheClientOptions = setup.ClusterCacheClientOptions
)

// managerCacheOptions is core/main.go's cache: Secrets cached only with the cluster-name label, and the
// informers named after the controller (setup.ManagerCacheOptions with no watch namespace).
func managerCacheOptions(scheme *runtime.Scheme) cache.Options {
	return setup.ManagerCacheOptions(scheme, ControllerName, "", syncPeriod)
}

// reconcilers are core/main.go's setupReconcilers calls for the core controllers, with its default flags.
func reconcilers(ctx context.Context, mgr manager.Manager, clusterCache clustercache.ClusterCache) []reconciler {
	return []reconciler{
		{"Cluster", func() error {
			return (&cluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache,
				RemoteConnectionGracePeriod: remoteConnectionGracePeriod}).SetupWithManager(ctx, mgr, concurrency(50))
		}},
		{"Machine", func() error {
			return (&machine.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache,
				RemoteConditionsGracePeriod: remoteConditionsGracePeriod}).SetupWithManager(ctx, mgr, concurrency(100))
		}},
		{"MachineSet", func() error {
			return (&machineset.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache,
				PreflightChecks: sets.New(clusterv1.MachineSetPreflightCheckAll),
			}).SetupWithManager(ctx, mgr, concurrency(50))
		}},
		{"MachineDeployment", func() error {
			return (&machinedeployment.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).
				SetupWithManager(ctx, mgr, concurrency(50))
		}},
		{"MachineHealthCheck", func() error {
			return (&machinehealthcheck.Reconciler{Client: mgr.GetClient(), ClusterCache: clusterCache}).
				SetupWithManager(ctx, mgr, concurrency(50))
		}},
	}
}

// webhooks are the webhooks core/main.go's setupWebhooks registers, so that each path of
// core/config/webhook/manifests.yaml is served, conversion included: v1.14 registers its v1beta1<->v1beta2
// converters with the manager's converter registry (WithConverter), and ensemble points the CRDs of the kinds
// it converts at /convert.
func webhooks(mgr manager.Manager, clusterCache clustercache.ClusterCache) []webhook {
	return []webhook{
		&coreadmission.ClusterClass{Client: mgr.GetClient()},
		&coreadmission.Cluster{Client: mgr.GetClient(), ClusterCacheReader: clusterCache},
		&coreadmission.Machine{}, &coreadmission.MachineSet{}, &coreadmission.MachineDeployment{},
		&coreadmission.MachineDrainRule{}, &coreadmission.MachinePool{}, &coreadmission.ClusterResourceSet{},
		&coreadmission.ClusterResourceSetBinding{}, &coreadmission.MachineHealthCheck{}, &coreadmission.ExtensionConfig{},
		&coreadmission.IPAddress{Client: mgr.GetAPIReader()}, &coreadmission.IPAddressClaim{},
	}
}

// setAPIVersionGetter hands the converters Setup's getter (core/webhooks/conversion's takes a context).
func setAPIVersionGetter(get func(schema.GroupKind) (string, error)) {
	conversion.SetAPIVersionGetter(func(_ context.Context, gk schema.GroupKind) (string, error) { return get(gk) })
}
