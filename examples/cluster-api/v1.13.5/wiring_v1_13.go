// The wiring of cluster-api v1.13.5, which this directory's go.mod requires (the other files of the package
// are links to the example's, one directory up, whose wiring_v1_14.go this file replaces): its main.go is at
// the module root, its reconcilers and webhooks are exported as aliases in controllers/alias.go and
// webhooks/alias.go, its default indexes in api/core/v1beta2/index, and its CRDs and webhook manifests are
// under config/. The setup helpers main.go calls are in internal/setup, which no other module can import:
// the five this example needs are copied below, each body as v1.13.5 has it (internal/setup/setup.go), the
// watch namespace left out (main.go's default is all namespaces).

package clusterapi

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/api/core/v1beta2/index"
	"sigs.k8s.io/cluster-api/controllers"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/remote"
	"sigs.k8s.io/cluster-api/util/secret"
	capiwebhooks "sigs.k8s.io/cluster-api/webhooks"
)

// Version is the version of cluster-api this file wires, the one its module's go.mod requires
// (TestVersionIsTheResolvedModule checks that they agree).
const Version = "v1.13.5"

// crdMigratorUseCache is the UseCache of the core and addons kinds in main.go's CRD migrator table
// (crdMigratorConfig): v1.13 reads them through the cache, so the CRD migrator's manager caches them.
const crdMigratorUseCache = true

// configDir is where the module keeps its CRDs (crd/bases) and webhook manifests (webhook/manifests.yaml).
const configDir = "config"

// addDefaultIndexes is main.go's setupIndexes call.
var addDefaultIndexes = index.AddDefaultIndexes

// managerCacheOptions is internal/setup.ManagerCacheOptions with no watch namespace: Secrets cached only
// with the cluster-name label, their managed fields dropped and their data too unless they are kubeconfigs.
// Unlike v1.14's it sets no NewInformer.
func managerCacheOptions(*runtime.Scheme) cache.Options {
	req, _ := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	return cache.Options{
		SyncPeriod: ptr.To(syncPeriod),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {
				Label: labels.NewSelector().Add(*req),
				Transform: func(in any) (any, error) {
					if s, ok := in.(*corev1.Secret); ok {
						s.SetManagedFields(nil)
						if !strings.HasSuffix(s.Name, fmt.Sprintf("-%s", secret.Kubeconfig)) {
							s.Data = nil
						}
					}
					return in, nil
				},
			},
		},
	}
}

// managerClientOptions is internal/setup.ManagerClientOptions: ConfigMaps and Secrets read uncached,
// Unstructured objects cached.
func managerClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}, Unstructured: true}}
}

// clusterCacheCacheOptions is internal/setup.ClusterCacheCacheOptions: Nodes indexed by providerID, their
// managed fields dropped.
func clusterCacheCacheOptions() clustercache.CacheOptions {
	return clustercache.CacheOptions{
		Indexes:  []clustercache.CacheOptionsIndex{clustercache.NodeProviderIDIndex},
		ByObject: map[client.Object]cache.ByObject{&corev1.Node{}: {Transform: cache.TransformStripManagedFields()}},
	}
}

// clusterCacheClientOptions is internal/setup.ClusterCacheClientOptions: the workload cluster clients' rate
// limits and User-Agent, and the kinds they read uncached.
func clusterCacheClientOptions(controllerName string, qps float32, burst int) clustercache.ClientOptions {
	return clustercache.ClientOptions{
		QPS:       qps,
		Burst:     burst,
		UserAgent: remote.DefaultClusterAPIUserAgent(controllerName),
		Cache: clustercache.ClientCacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.Pod{},
			&appsv1.DaemonSet{}, &storagev1.VolumeAttachment{}, &corev1.PersistentVolume{}}},
	}
}

// createSecretCachingClient is internal/setup.CreateSecretCachingClient: a client that reads through the
// manager's cache, where Secrets are cached (the manager's own client reads them uncached).
func createSecretCachingClient(mgr manager.Manager) (client.Client, error) {
	return client.New(mgr.GetConfig(), client.Options{HTTPClient: mgr.GetHTTPClient(), Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
}

// reconcilers are main.go's setupReconcilers calls for the core controllers, with its default flags.
func reconcilers(ctx context.Context, mgr manager.Manager, clusterCache clustercache.ClusterCache) []reconciler {
	return []reconciler{
		{"Cluster", func() error {
			return (&controllers.ClusterReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache,
				RemoteConnectionGracePeriod: remoteConnectionGracePeriod}).SetupWithManager(ctx, mgr, concurrency(50))
		}},
		{"Machine", func() error {
			return (&controllers.MachineReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache,
				RemoteConditionsGracePeriod: remoteConditionsGracePeriod}).SetupWithManager(ctx, mgr, concurrency(100))
		}},
		{"MachineSet", func() error {
			return (&controllers.MachineSetReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache,
				PreflightChecks: sets.New(clusterv1.MachineSetPreflightCheckAll),
			}).SetupWithManager(ctx, mgr, concurrency(50))
		}},
		{"MachineDeployment", func() error {
			return (&controllers.MachineDeploymentReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).
				SetupWithManager(ctx, mgr, concurrency(50))
		}},
		{"MachineHealthCheck", func() error {
			return (&controllers.MachineHealthCheckReconciler{Client: mgr.GetClient(), ClusterCache: clusterCache}).
				SetupWithManager(ctx, mgr, concurrency(50))
		}},
	}
}

// webhooks are the webhooks main.go's setupWebhooks registers, so that each path of
// config/webhook/manifests.yaml is served, conversion included: at v1.13 the v1beta1 types are
// conversion.Convertible to the v1beta2 hubs in the scheme, so envtest points their CRDs at /convert and the
// webhook builder serves it.
func webhooks(mgr manager.Manager, clusterCache clustercache.ClusterCache) []webhook {
	return []webhook{
		&capiwebhooks.ClusterClass{Client: mgr.GetClient()},
		&capiwebhooks.Cluster{Client: mgr.GetClient(), ClusterCacheReader: clusterCache},
		&capiwebhooks.Machine{}, &capiwebhooks.MachineSet{}, &capiwebhooks.MachineDeployment{},
		&capiwebhooks.MachineDrainRule{}, &capiwebhooks.MachinePool{}, &capiwebhooks.ClusterResourceSet{},
		&capiwebhooks.ClusterResourceSetBinding{}, &capiwebhooks.MachineHealthCheck{}, &capiwebhooks.ExtensionConfig{},
		&capiwebhooks.IPAddress{Client: mgr.GetAPIReader()}, &capiwebhooks.IPAddressClaim{},
	}
}

// setAPIVersionGetter hands the v1beta1 conversions Setup's getter (clusterv1beta1.SetAPIVersionGetter).
func setAPIVersionGetter(get func(schema.GroupKind) (string, error)) {
	clusterv1beta1.SetAPIVersionGetter(get)
}
