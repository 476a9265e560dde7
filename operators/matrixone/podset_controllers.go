package matrixone

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
)

// LogSetReconciler reconciles LogSets (controller "matrixone-logset"): the log service pods <name>-<i>, the
// ConfigMap <name>-config they run from, and the status (Ready, configSuffix, readyReplicas, discovery
// "<namespace>/<name>", the key of the LogSet's HAKeeper instance). See podset.go for the pass, and
// MO-CONCURRENT-ROLLING-RESTART for how a config change rolls.
//
// Set up like any controller (the same for DNSetReconciler and ProxySetReconciler):
//
//	err := (&matrixone.LogSetReconciler{Client: mgr.GetClient(), Options: opts}).SetupWithManager(mgr)
type LogSetReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// Options are the defect switches, the config revision and the durations; zero durations mean their
	// defaults.
	Options Options
}

// SetupWithManager registers the controller "matrixone-logset" with mgr: For(LogSet) filtered to
// generation, label or annotation changes, Owns(Pod), Owns(ConfigMap).
func (r *LogSetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	return setupPodSet(mgr, LogSetControllerName, &mov1.LogSet{}, r)
}

// Reconcile runs one pass over one LogSet. API errors other than conflicts are returned.
func (r *LogSetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Client == nil {
		return ctrl.Result{}, errNilClient
	}
	return (&podSetReconciler{client: r.Client, opts: r.Options, controller: LogSetControllerName,
		gvk: mov1.GroupVersion.WithKind("LogSet"), newObj: func() client.Object { return &mov1.LogSet{} }}).
		reconcile(ctx, req)
}

// DNSetReconciler reconciles DNSets (controller "matrixone-dnset"): like LogSetReconciler, after waiting
// (every pass) until the LogSet named by spec.deps.logSet is Ready; the DN config carries that LogSet's
// discovery address. With MO-CONCURRENT-ROLLING-RESTART fixed, a config change rolls the DN pods only once
// the LogSet is Ready again on its new config.
type DNSetReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// Options are the defect switches, the config revision and the durations; zero durations mean their
	// defaults.
	Options Options
}

// SetupWithManager registers the controller "matrixone-dnset" with mgr: For(DNSet) filtered to
// generation, label or annotation changes, Owns(Pod), Owns(ConfigMap).
func (r *DNSetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	return setupPodSet(mgr, DNSetControllerName, &mov1.DNSet{}, r)
}

// Reconcile runs one pass over one DNSet. API errors other than conflicts are returned.
func (r *DNSetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Client == nil {
		return ctrl.Result{}, errNilClient
	}
	return (&podSetReconciler{client: r.Client, opts: r.Options, controller: DNSetControllerName,
		gvk: mov1.GroupVersion.WithKind("DNSet"), newObj: func() client.Object { return &mov1.DNSet{} }}).
		reconcile(ctx, req)
}

// ProxySetReconciler reconciles ProxySets (controller "matrixone-proxyset"): like DNSetReconciler. With
// MO-CONCURRENT-ROLLING-RESTART fixed, a config change rolls the proxy pods only once the LogSet and every
// DNSet of the namespace that depends on it are Ready again on their new configs.
type ProxySetReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// Options are the defect switches, the config revision and the durations; zero durations mean their
	// defaults.
	Options Options
}

// SetupWithManager registers the controller "matrixone-proxyset" with mgr: For(ProxySet) filtered
// to generation, label or annotation changes, Owns(Pod), Owns(ConfigMap).
func (r *ProxySetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	return setupPodSet(mgr, ProxySetControllerName, &mov1.ProxySet{}, r)
}

// Reconcile runs one pass over one ProxySet. API errors other than conflicts are returned.
func (r *ProxySetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Client == nil {
		return ctrl.Result{}, errNilClient
	}
	return (&podSetReconciler{client: r.Client, opts: r.Options, controller: ProxySetControllerName,
		gvk: mov1.GroupVersion.WithKind("ProxySet"), newObj: func() client.Object { return &mov1.ProxySet{} }}).
		reconcile(ctx, req)
}
