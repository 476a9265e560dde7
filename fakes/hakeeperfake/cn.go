package hakeeperfake

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ensembletest/ensemble/fakes/internal/trigger"
	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	hk "github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

// ControllerName names the CN process simulator's controller.
const ControllerName = "hakeeper-cn"

// Pod labels and values the simulator reads (the MatrixOne operator's).
const (
	// LabelComponent is the component label; CN pods carry ComponentCN.
	LabelComponent = "matrixorigin.io/component"
	// ComponentCN marks CN pods.
	ComponentCN = "CNSet"
	// LabelPoolName names a CN pod's CNPool, whose spec.deps.logSet names the LogSet to register with.
	LabelPoolName = "pool.matrixorigin.io/pool-name"
)

// CNSimReconciler simulates the CN processes, controller "hakeeper-cn". It reconciles CN pods (label
// matrixorigin.io/component=CNSet) in every namespace: once a pod is Running and not being deleted, and
// RegisterDelay has passed since the simulator first saw it Running, its CN process registers its store
// (hk.StoreUUID(namespace, pod, spec.subdomain)) in the instance of its LogSet: the LogSet named by
// spec.deps.logSet of the CNPool its pool-name label names, or, when the pod has no pool (or the pool is
// gone), the only instance of the namespace if there is exactly one. A registration that cannot happen yet
// (LogSet without instance, pool not found, dropped) is retried every Heartbeat; a store the operator
// deleted while the pod still runs is registered again at the pod's next pass (any change of the pod), as a
// running process's heartbeat re-creates it; such a store expires (OpExpire) once the simulator sees the pod
// gone or being deleted, as HAKeeper drops a store whose process stopped heartbeating. The simulator's cache
// may lag the operator's: a pass that still sees the pod running just after the operator's finalizer deleted
// its store registers it again, and without the expiry that store would outlive its pod. A store registered
// once is never removed by the simulator (only the operator's DeleteCNStore removes it), and the simulator
// writes nothing to Kubernetes. Create it with New (Registry.Sim).
type CNSimReconciler struct {
	// Client reads pods and pools (from the cache) and LogSets (for Registry.Instance). Defaults to
	// mgr.GetClient() at setup when nil.
	Client client.Client
	// managerClient is true when Client came from a manager in SetupWithManager.
	managerClient bool

	reg     *Registry
	trigger trigger.Source

	mu   sync.Mutex
	seen map[types.NamespacedName]time.Time // first seen Running
}

// SetupWithManager registers the controller "hakeeper-cn" with mgr: it watches CN pods and the
// simulator's own trigger. It also hands Client to
// the Registry for its LogSet reads.
func (s *CNSimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// A client the manager handed out is taken again from each manager (a restarted manager's first one
	// refuses writes); one set by the caller is kept.
	if s.Client == nil || s.managerClient {
		s.Client, s.managerClient = mgr.GetClient(), true
	}
	s.reg.setReader(s.Client)
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[LabelComponent] == ComponentCN
		}))).
		WatchesRawSource(&s.trigger).
		Complete(s)
}

// SetupWithManager registers the simulator's controller with mgr (Sim.Client defaults to mgr.GetClient()).
func (r *Registry) SetupWithManager(mgr ctrl.Manager) error { return r.Sim.SetupWithManager(mgr) }

// Reconcile runs one CN process step for one pod: register its store when due (see CNSimReconciler).
func (s *CNSimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if s.Client == nil {
		return reconcile.Result{}, fmt.Errorf("hakeeper: %s has no client (set it up with a manager)", ControllerName)
	}
	pod := &corev1.Pod{}
	if err := s.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		s.forget(req.NamespacedName)
		if apierrors.IsNotFound(err) {
			s.reg.expire(req.Namespace, req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !pod.DeletionTimestamp.IsZero() {
		s.reg.expire(pod.Namespace, pod.Name)
	}
	if pod.Labels[LabelComponent] != ComponentCN || !pod.DeletionTimestamp.IsZero() ||
		pod.Status.Phase != corev1.PodRunning {
		if pod.Status.Phase != corev1.PodRunning {
			s.forget(req.NamespacedName)
		}
		return reconcile.Result{}, nil
	}
	opts := s.reg.opts
	now := opts.Now()
	s.mu.Lock()
	first, ok := s.seen[req.NamespacedName]
	if !ok {
		first = now
		s.seen[req.NamespacedName] = now
	}
	s.mu.Unlock()
	if wait := first.Add(opts.RegisterDelay).Sub(now); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	uuid := hk.StoreUUID(pod.Namespace, pod.Name, pod.Spec.Subdomain)
	logSet, err := s.logSetOf(ctx, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	if logSet == "" {
		return reconcile.Result{RequeueAfter: opts.Heartbeat}, nil
	}
	if _, err := s.reg.Instance(ctx, pod.Namespace, logSet); err != nil {
		return reconcile.Result{RequeueAfter: opts.Heartbeat}, nil
	}
	if st, ok := s.reg.Store(pod.Namespace, uuid); ok && st.PodName == pod.Name {
		return reconcile.Result{}, nil
	}
	if !s.reg.Register(pod.Namespace, logSet, pod.Name, uuid) {
		return reconcile.Result{RequeueAfter: opts.Heartbeat}, nil
	}
	return reconcile.Result{}, nil
}

// logSetOf returns the LogSet a CN pod registers with: its pool's spec.deps.logSet, else the namespace's
// only instance, else "".
func (s *CNSimReconciler) logSetOf(ctx context.Context, pod *corev1.Pod) (string, error) {
	if name := pod.Labels[LabelPoolName]; name != "" {
		pool := &mov1.CNPool{}
		err := s.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, pool)
		if err == nil && pool.Spec.Deps.LogSet != "" {
			return pool.Spec.Deps.LogSet, nil
		}
		if client.IgnoreNotFound(err) != nil {
			return "", err
		}
	}
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	sp := s.reg.spaceLocked(pod.Namespace)
	if len(sp.instances) == 1 {
		for name := range sp.instances {
			return name, nil
		}
	}
	return "", nil
}

func (s *CNSimReconciler) forget(k types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, k)
}

// Kick re-runs the simulator for every pod of namespace it has seen running (e.g. after DropRegistrations
// is switched off, to register at once rather than at the next Heartbeat).
func (r *Registry) Kick(namespace string) {
	r.Sim.mu.Lock()
	var reqs []reconcile.Request
	for k := range r.Sim.seen {
		if k.Namespace == namespace {
			reqs = append(reqs, reconcile.Request{NamespacedName: k})
		}
	}
	r.Sim.mu.Unlock()
	r.Sim.trigger.Enqueue(reqs...)
}
