// Package kueue wires Kueue (sigs.k8s.io/kueue v0.17.0) into an ensemble run: its own, unmodified core
// controllers (ResourceFlavor, ClusterQueue, LocalQueue, Cohort, Workload, WorkloadPriorityClass), the batch
// Job integration with its webhooks, the core webhooks and the scheduler, built the way Kueue's
// cmd/kueue/main.go builds them from a Configuration (config.yaml, defaulted by Kueue's own config.Load).
package kueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/component-base/featuregate"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuealpha "sigs.k8s.io/kueue/apis/kueue/v1alpha1"
	kueuev1beta1 "sigs.k8s.io/kueue/apis/kueue/v1beta1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/config"
	"sigs.k8s.io/kueue/pkg/constants"
	"sigs.k8s.io/kueue/pkg/controller/core"
	"sigs.k8s.io/kueue/pkg/controller/core/indexer"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	_ "sigs.k8s.io/kueue/pkg/controller/jobs/job" // registers the batch/job integration, as main.go's jobs import does
	"sigs.k8s.io/kueue/pkg/features"
	"sigs.k8s.io/kueue/pkg/metrics"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	"sigs.k8s.io/kueue/pkg/util/kubeversion"
	"sigs.k8s.io/kueue/pkg/webhooks"

	"github.com/ensembletest/ensemble/suite"
)

// Module is the Go module Kueue is imported from.
const Module = "sigs.k8s.io/kueue"

// CRDDir is the directory, relative to Module's root, holding the kueue.x-k8s.io CRD YAML.
const CRDDir = "config/components/crd/bases"

// WebhookManifest is the file, relative to Module's root, holding Kueue's webhook configurations (every
// integration's; Webhooks keeps those of the kinds this package sets up).
const WebhookManifest = "config/components/webhook/manifests.yaml"

// thisModule is this example's module, whose root holds ConfigFile.
const thisModule = "github.com/ensembletest/ensemble/examples/kueue"

// ConfigFile is the Kueue Configuration (config.kueue.x-k8s.io/v1beta2) the example runs with, relative to
// this module's root.
const ConfigFile = "config.yaml"

// CRDPath returns the absolute path of CRDDir in the module cache, as suite.ModuleDir (`go list -m`)
// resolves Module from the current directory (which must be inside this module, as it is under `go test`).
func CRDPath() (string, error) {
	dir, err := suite.ModuleDir(Module)
	if err != nil {
		return "", fmt.Errorf("kueue: %w", err)
	}
	return filepath.Join(dir, CRDDir), nil
}

// Scheme returns a scheme holding client-go's kinds, Kueue's kueue.x-k8s.io kinds (v1beta2, the storage
// version, and v1beta1 and v1alpha1), its Configuration API and what the enabled job integrations add, as
// main.go's init builds it (less the ProvisioningRequest and ClusterProfile APIs of integrations not set up).
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kueue.AddToScheme,
		kueuev1beta1.AddToScheme, kueuealpha.AddToScheme, configapi.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	err := jobframework.ForEachIntegration(func(_ string, cb jobframework.IntegrationCallbacks) error {
		if cb.AddToScheme != nil {
			return cb.AddToScheme(s)
		}
		return nil
	})
	return s, err
}

// Load reads ConfigFile with Kueue's own loader (config.Load: decoded, defaulted and validated as main.go's
// --config flag is) and returns the controller-runtime options Kueue derives from it and the Configuration.
// scheme must come from Scheme.
func Load(scheme *runtime.Scheme) (ctrl.Options, configapi.Configuration, error) {
	dir, err := suite.ModuleDir(thisModule)
	if err != nil {
		return ctrl.Options{}, configapi.Configuration{}, fmt.Errorf("kueue: %w", err)
	}
	opts, cfg, err := config.Load(scheme, filepath.Join(dir, ConfigFile))
	if err != nil {
		return opts, cfg, fmt.Errorf("kueue: loading %s: %w", ConfigFile, err)
	}
	return opts, cfg, nil
}

// ManagerOptions returns the suite manager named name that runs Kueue with configuration cfg (from Load),
// handing controller-runtime the cache and controller options Kueue's config.Load derived (opts), as
// main.go hands them to ctrl.NewManager.
func ManagerOptions(name string, opts ctrl.Options, cfg configapi.Configuration) suite.ManagerOptions {
	return suite.ManagerOptions{Name: name, Cache: opts.Cache, Controller: opts.Controller,
		Register: func(ctx context.Context, mgr manager.Manager) error { return Setup(ctx, mgr, &cfg) }}
}

// Setup registers Kueue with mgr as main.go does for cfg: the scheduler cache and the queue manager, the
// field indexes, the core controllers, the job integrations' controllers and webhooks, the core webhooks and
// the scheduler (a manager Runnable). ctx ends with mgr. Left out, as cfg turns them off or ensemble owns
// them: leader election and its role tracker, internal certificate management, metrics and health
// servers, the visibility server, MultiKueue, topology-aware scheduling, the provisioning admission check
// (envtest serves no ProvisioningRequest API), the SIGUSR2 cache dumper and the client rate limiter.
func Setup(ctx context.Context, mgr manager.Manager, cfg *configapi.Configuration) error {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return fmt.Errorf("kueue: feature gates: %w", err)
	}
	for _, f := range []featuregate.Feature{features.MultiKueue, features.TopologyAwareScheduling,
		features.VisibilityOnDemand, features.FailureRecoveryPolicy, features.DynamicResourceAllocation} {
		if features.Enabled(f) {
			return fmt.Errorf("kueue: feature %s is on; %s must turn it off (this example does not set it up)", f, ConfigFile)
		}
	}
	if cfg.InternalCertManagement != nil && *cfg.InternalCertManagement.Enable {
		return errors.New("kueue: internalCertManagement is on; envtest makes the webhook certificates, set it off in " + ConfigFile)
	}
	lqMetrics := metrics.NewLocalQueueMetricsConfig(cfg.Metrics.LocalQueueMetrics)
	cCache := schdcache.New(mgr.GetClient(), schdcache.WithResourceMetrics(cfg.Metrics.EnableClusterQueueResources),
		schdcache.WithLocalQueueMetrics(lqMetrics))
	requeuer := qcache.NewRequeuer()
	if err := mgr.Add(requeuer); err != nil {
		return fmt.Errorf("kueue: requeuer: %w", err)
	}
	expectations := preemptexpectations.New()
	queues := qcache.NewManager(mgr.GetClient(), cCache, requeuer,
		qcache.WithPreemptionExpectations(expectations), qcache.WithLocalQueueMetrics(lqMetrics))

	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("kueue: indexes: %w", err)
	}
	if err := jobframework.SetupIndexes(ctx, mgr.GetFieldIndexer(), jobframework.WithEnabledFrameworks(cfg.Integrations.Frameworks)); err != nil {
		return fmt.Errorf("kueue: job indexes: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("kueue: discovery client: %w", err)
	}
	versions := kubeversion.NewServerVersionFetcher(dc)
	if err := mgr.Add(versions); err != nil {
		return fmt.Errorf("kueue: server version fetcher: %w", err)
	}
	if err := versions.FetchServerVersion(); err != nil {
		return fmt.Errorf("kueue: server version: %w", err)
	}

	if failed, err := core.SetupControllers(mgr, queues, cCache, cfg, nil, expectations, nil); err != nil {
		return fmt.Errorf("kueue: controller %s: %w", failed, err)
	}
	nsSelector, err := metav1.LabelSelectorAsSelector(cfg.ManagedJobsNamespaceSelector)
	if err != nil {
		return fmt.Errorf("kueue: managedJobsNamespaceSelector: %w", err)
	}
	if err := jobframework.SetupControllers(ctx, mgr, ctrl.Log.WithName("kueue-setup"),
		jobframework.WithManageJobsWithoutQueueName(cfg.ManageJobsWithoutQueueName),
		jobframework.WithWaitForPodsReady(cfg.WaitForPodsReady),
		jobframework.WithKubeServerVersion(versions),
		jobframework.WithEnabledFrameworks(cfg.Integrations.Frameworks),
		jobframework.WithEnabledExternalFrameworks(cfg.Integrations.ExternalFrameworks),
		jobframework.WithManagerName(constants.KueueName),
		jobframework.WithLabelKeysToCopy(cfg.Integrations.LabelKeysToCopy),
		jobframework.WithCache(cCache),
		jobframework.WithQueues(queues),
		jobframework.WithObjectRetentionPolicies(cfg.ObjectRetentionPolicies),
		jobframework.WithManagedJobsNamespaceSelector(nsSelector),
	); err != nil {
		return fmt.Errorf("kueue: job integrations: %w", err)
	}
	if failed, err := webhooks.Setup(mgr, nil); err != nil {
		return fmt.Errorf("kueue: webhook %s: %w", failed, err)
	}
	go queues.CleanUpOnContext(ctx)
	go cCache.CleanUpOnContext(ctx)

	sched := scheduler.New(queues, cCache, mgr.GetClient(), mgr.GetEventRecorderFor(constants.AdmissionName),
		scheduler.WithFairSharing(cfg.FairSharing),
		scheduler.WithAdmissionFairSharing(cfg.AdmissionFairSharing),
		scheduler.WithPreemptionExpectations(expectations))
	if err := mgr.Add(sched); err != nil {
		return fmt.Errorf("kueue: scheduler: %w", err)
	}
	return nil
}

// Webhooks returns Kueue's webhook configurations (WebhookManifest) narrowed to the webhooks of the kinds
// Setup serves: the kueue.x-k8s.io core kinds and the batch Jobs of the batch/job integration. The manifest
// also configures every other integration's (JobSet, Ray, Kubeflow, Pods, Deployments, ...), which Setup
// does not register and whose paths nothing would answer.
func Webhooks() (suite.WebhookOptions, error) {
	dir, err := suite.ModuleDir(Module)
	if err != nil {
		return suite.WebhookOptions{}, fmt.Errorf("kueue: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, WebhookManifest))
	if err != nil {
		return suite.WebhookOptions{}, fmt.Errorf("kueue: %w", err)
	}
	defer f.Close()
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	for dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096); ; {
		var doc struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
			Webhooks          json.RawMessage `json:"webhooks"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return suite.WebhookOptions{}, fmt.Errorf("kueue: %s: %w", WebhookManifest, err)
		}
		switch doc.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: doc.ObjectMeta}
			if err := json.Unmarshal(doc.Webhooks, &m.Webhooks); err != nil {
				return suite.WebhookOptions{}, fmt.Errorf("kueue: %s: %w", WebhookManifest, err)
			}
			mutating = append(mutating, m)
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: doc.ObjectMeta}
			if err := json.Unmarshal(doc.Webhooks, &v.Webhooks); err != nil {
				return suite.WebhookOptions{}, fmt.Errorf("kueue: %s: %w", WebhookManifest, err)
			}
			validating = append(validating, v)
		}
	}
	served := func(rules []admissionregistrationv1.RuleWithOperations) bool {
		return slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool {
			return slices.Contains(r.APIGroups, kueue.GroupVersion.Group) || slices.Contains(r.APIGroups, "batch")
		})
	}
	for _, m := range mutating {
		m.Webhooks = slices.DeleteFunc(m.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool { return !served(w.Rules) })
	}
	for _, v := range validating {
		v.Webhooks = slices.DeleteFunc(v.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool { return !served(w.Rules) })
	}
	return suite.WebhookOptions{Mutating: mutating, Validating: validating}, nil
}
