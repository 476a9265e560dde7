package dataplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// GCRequestName is the Name of every "dataplane-gc" reconcile request: the collector works one namespace at a
// time, so a request is {Namespace: ns, Name: "*"}; {Namespace: "", Name: "*"} is the pass over cluster-scoped
// objects (and namespaced dependents of cluster-scoped owners).
const GCRequestName = "*"

// servedKinds returns a metadata prototype of every kind the API server serves with list, watch and delete
// (its preferred version), but Events (they are never owned) and Namespaces (never collected). Errors:
// discovery's, for a group it could not read.
func servedKinds(cfg *rest.Config) ([]client.Object, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		return nil, fmt.Errorf("discovering the served kinds: %w", err)
	}
	var out []client.Object
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			verbs := sets.New(r.Verbs...)
			if strings.Contains(r.Name, "/") || !verbs.HasAll("list", "watch", "delete") || r.Kind == "Event" ||
				(gv.Group == "" && r.Kind == "Namespace") {
				continue
			}
			p := &metav1.PartialObjectMetadata{}
			p.SetGroupVersionKind(gv.WithKind(r.Kind))
			out = append(out, p)
		}
	}
	return out, nil
}

// GCReconciler is the owner-reference garbage collector, controller "dataplane-gc". It watches the metadata
// of every Options.GCKinds kind (by default every served kind) in every namespace (Namespaces are never
// collected) and, per namespace pass:
//   - background: an object none of whose owners (matched by UID; an owner recreated under the same name is a
//     different owner) exists any more is deleted with propagationPolicy Background and a UID precondition.
//     Absence seen in the cache is confirmed with a live read first, so a dependent created just after its
//     owner is never collected by mistake. An object with one live owner and one missing owner is kept (the
//     real collector would also strip the dangling reference; this one leaves it);
//   - foreground: an owner with a deletionTimestamp and the "foregroundDeletion" finalizer counts as gone for
//     its dependents, which are deleted (background policy); the finalizer is removed once no object with a
//     blockOwnerDeletion=true reference to the owner remains (terminating dependents still block);
//   - orphan: an owner with a deletionTimestamp and the "orphan" finalizer has its references removed from
//     its dependents (a JSON merge patch of ownerReferences with an optimistic lock), then the finalizer.
//
// Create it with New (DataPlane.GC); the zero value is not usable.
type GCReconciler struct {
	// Client reads (from the cache) and writes (deletes, finalizer removal) objects. Defaults to
	// mgr.GetClient() at setup when nil.
	Client client.Client
	// APIReader confirms, uncached, that an owner is gone before its dependents are deleted, and looks up
	// owners whose kind is not in GCKinds. Defaults to mgr.GetAPIReader() at setup when nil.
	APIReader client.Reader
	// RESTMapper resolves owner references to resources and scopes. Defaults to mgr.GetRESTMapper().
	RESTMapper meta.RESTMapper

	opts Options
	log  *writeLog

	mu    sync.Mutex
	kinds []gcKind
}

type gcKind struct {
	gvk        schema.GroupVersionKind
	namespaced bool
}

// SetupWithManager registers the controller "dataplane-gc" with mgr: a metadata-only watch per
// GCKinds kind (creations, deletions, and updates that change ownerReferences, finalizers or the deletion
// timestamp) mapped to namespace passes. It fails when a
// kind is not in mgr's scheme or not served by the API server.
func (g *GCReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if g.Client == nil {
		g.Client = mgr.GetClient()
	}
	if g.APIReader == nil {
		g.APIReader = mgr.GetAPIReader()
	}
	if g.RESTMapper == nil {
		g.RESTMapper = mgr.GetRESTMapper()
	}
	b := ctrl.NewControllerManagedBy(mgr).Named(GCControllerName)
	var kinds []gcKind
	protos := g.opts.GCKinds
	if len(protos) == 0 {
		var err error
		if protos, err = servedKinds(mgr.GetConfig()); err != nil {
			return fmt.Errorf("GC: %w", err)
		}
	}
	for _, proto := range protos {
		gvk, err := apiutil.GVKForObject(proto, mgr.GetScheme())
		if err != nil {
			return fmt.Errorf("GC kind %T: %w", proto, err)
		}
		if gvk.Group == "" && gvk.Kind == "Namespace" {
			continue // envtest never deletes namespaces
		}
		m, err := g.RESTMapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("GC kind %s: %w", gvk, err)
		}
		kinds = append(kinds, gcKind{gvk: gvk, namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace})
		b = b.WatchesMetadata(proto, handler.EnqueueRequestsFromMapFunc(g.mapEvent), builder.WithPredicates(gcPredicate()))
	}
	g.mu.Lock()
	g.kinds = kinds
	g.mu.Unlock()
	return b.Complete(g)
}

func gcPredicate() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
				!equalOwnerRefs(o.GetOwnerReferences(), n.GetOwnerReferences())
		},
	}
}

func equalOwnerRefs(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.UID != y.UID || x.Name != y.Name || x.Kind != y.Kind || x.APIVersion != y.APIVersion ||
			ptrVal(x.BlockOwnerDeletion) != ptrVal(y.BlockOwnerDeletion) {
			return false
		}
	}
	return true
}

func ptrVal(p *bool) bool { return p != nil && *p }

func nsRequest(ns string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: GCRequestName}}
}

// mapEvent maps an event on obj to the namespace passes it concerns: its own namespace; for a cluster-scoped
// object also the cluster pass and every namespace holding one of its dependents; for an object referencing a
// cluster-scoped owner also the cluster pass (that owner may wait for it in a foreground deletion).
func (g *GCReconciler) mapEvent(ctx context.Context, obj client.Object) []reconcile.Request {
	reqs := []reconcile.Request{nsRequest(obj.GetNamespace())}
	if obj.GetNamespace() == "" {
		seen := map[string]bool{"": true}
		objs, err := g.list(ctx, "", true)
		if err == nil {
			for _, o := range objs {
				if ns := o.GetNamespace(); !seen[ns] && referencesUID(o, obj.GetUID()) {
					seen[ns] = true
					reqs = append(reqs, nsRequest(ns))
				}
			}
		}
		return reqs
	}
	for _, ref := range obj.GetOwnerReferences() {
		if namespaced, err := g.namespacedRef(ref); err == nil && !namespaced {
			return append(reqs, nsRequest(""))
		}
	}
	return reqs
}

func referencesUID(o client.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func (g *GCReconciler) gcKinds() []gcKind {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.kinds
}

// list returns the metadata of every GCKinds object in namespace ns from the cache. With all, it lists every
// namespace and cluster-scoped objects.
func (g *GCReconciler) list(ctx context.Context, ns string, all bool) ([]*metav1.PartialObjectMetadata, error) {
	return g.listFrom(ctx, g.Client, ns, all)
}

// listFrom is list, read through r (the cache, or the API server itself).
func (g *GCReconciler) listFrom(ctx context.Context, r client.Reader, ns string, all bool) ([]*metav1.PartialObjectMetadata, error) {
	var out []*metav1.PartialObjectMetadata
	for _, k := range g.gcKinds() {
		if !all && k.namespaced == (ns == "") {
			continue
		}
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
		var opts []client.ListOption
		if !all && ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := r.List(ctx, l, opts...); err != nil {
			return nil, fmt.Errorf("list %s: %w", k.gvk.Kind, err)
		}
		for i := range l.Items {
			o := &l.Items[i]
			o.SetGroupVersionKind(k.gvk)
			out = append(out, o)
		}
	}
	return out, nil
}

func (g *GCReconciler) namespacedRef(ref metav1.OwnerReference) (bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false, err
	}
	m, err := g.RESTMapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if err != nil {
		return false, err
	}
	return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

type ownerState int

const (
	ownerAlive ownerState = iota
	ownerGone
	ownerForeground // being deleted in foreground: counts as gone for its dependents
)

// Reconcile runs one namespace pass (see GCReconciler). Request names other than "*" are ignored.
func (g *GCReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Name != GCRequestName {
		return reconcile.Result{}, nil
	}
	ns := req.Namespace
	cluster := ns == ""
	scope, err := g.list(ctx, ns, cluster)
	if err != nil {
		return reconcile.Result{}, err
	}
	byUID := make(map[types.UID]*metav1.PartialObjectMetadata, len(scope))
	for _, o := range scope {
		byUID[o.UID] = o
	}
	// Objects this pass acts on: the namespace's own, or (cluster pass) the cluster-scoped ones plus the
	// namespaced dependents of cluster-scoped owners.
	var errs []error
	for _, o := range scope {
		if cluster && o.Namespace != "" && !g.hasClusterOwner(o) {
			continue
		}
		if o.DeletionTimestamp == nil && len(o.OwnerReferences) > 0 {
			if err := g.collect(ctx, o, byUID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, o := range scope {
		if o.DeletionTimestamp == nil || (cluster && o.Namespace != "") {
			continue
		}
		if slices.Contains(o.Finalizers, metav1.FinalizerOrphanDependents) {
			if err := g.orphan(ctx, o); err != nil {
				errs = append(errs, err)
			}
		}
		if slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
			blocked := false
			for _, d := range scope {
				for _, r := range d.OwnerReferences {
					if r.UID == o.UID && ptrVal(r.BlockOwnerDeletion) {
						blocked = true
					}
				}
			}
			if !blocked {
				if err := g.removeFinalizer(ctx, o, metav1.FinalizerDeleteDependents); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return reconcile.Result{}, errors.Join(errs...)
}

func (g *GCReconciler) hasClusterOwner(o *metav1.PartialObjectMetadata) bool {
	for _, r := range o.OwnerReferences {
		if namespaced, err := g.namespacedRef(r); err == nil && !namespaced {
			return true
		}
	}
	return false
}

// collect deletes dependent o when none of its owners is alive (a live read confirms each absence).
func (g *GCReconciler) collect(ctx context.Context, o *metav1.PartialObjectMetadata, byUID map[types.UID]*metav1.PartialObjectMetadata) error {
	for _, r := range o.OwnerReferences {
		st, err := g.owner(ctx, o.Namespace, r, byUID, false)
		if err != nil || st == ownerAlive {
			return err
		}
	}
	// Every owner looks gone or foreground-deleting in the cache: confirm with live reads.
	for _, r := range o.OwnerReferences {
		st, err := g.owner(ctx, o.Namespace, r, nil, true)
		if err != nil || st == ownerAlive {
			return err
		}
	}
	err := g.Client.Delete(ctx, o, client.Preconditions{UID: &o.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Already gone (an earlier pass of the collector, seen late through the cache), or a new object under
		// that name: nothing was deleted, so nothing is logged.
		return nil
	}
	g.log.add(Entry{Controller: GCControllerName, Namespace: o.Namespace, Name: o.Name, Kind: o.Kind, Op: "delete",
		Detail: "owners gone: " + refsString(o.OwnerReferences), Err: errText(err)})
	return err
}

func refsString(refs []metav1.OwnerReference) string {
	s := ""
	for i, r := range refs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s/%s(%s)", r.Kind, r.Name, r.UID)
	}
	return s
}

// owner reports the state of the owner ref of an object in namespace ns, from byUID and the cache, or (live) from
// the API server. An owner whose kind the RESTMapper does not know counts as alive (never collect on doubt).
func (g *GCReconciler) owner(ctx context.Context, ns string, r metav1.OwnerReference,
	byUID map[types.UID]*metav1.PartialObjectMetadata, live bool) (ownerState, error) {
	stateOf := func(o metav1.Object) ownerState {
		if o.GetUID() != r.UID {
			return ownerGone
		}
		if o.GetDeletionTimestamp() != nil && slices.Contains(o.GetFinalizers(), metav1.FinalizerDeleteDependents) {
			return ownerForeground
		}
		return ownerAlive
	}
	if !live {
		if o, ok := byUID[r.UID]; ok {
			return stateOf(o), nil
		}
	}
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		return ownerAlive, nil
	}
	gvk := gv.WithKind(r.Kind)
	namespaced, err := g.namespacedRef(r)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return ownerAlive, nil
		}
		return ownerAlive, err
	}
	k := types.NamespacedName{Name: r.Name}
	if namespaced {
		k.Namespace = ns
	}
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(gvk)
	var reader client.Reader = g.APIReader
	if !live && g.inKinds(gvk) {
		reader = g.Client
	}
	if err := reader.Get(ctx, k, o); err != nil {
		if apierrors.IsNotFound(err) {
			return ownerGone, nil
		}
		return ownerAlive, err
	}
	return stateOf(o), nil
}

func (g *GCReconciler) inKinds(gvk schema.GroupVersionKind) bool {
	for _, k := range g.gcKinds() {
		if k.gvk == gvk {
			return true
		}
	}
	return false
}

// orphan removes owner o's references from its dependents, then o's orphan finalizer.
//
// The dependents are listed from the API server, not the cache: one created just before its owner's deletion
// may not be in the cache yet, and would keep a reference to an owner that is gone.
func (g *GCReconciler) orphan(ctx context.Context, o *metav1.PartialObjectMetadata) error {
	live, err := g.listFrom(ctx, g.APIReader, o.Namespace, o.Namespace == "")
	if err != nil {
		return err
	}
	for _, d := range live {
		if !referencesUID(d, o.UID) {
			continue
		}
		patched := d.DeepCopy()
		base := d.DeepCopy()
		patched.OwnerReferences = slices.DeleteFunc(patched.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == o.UID })
		err := g.Client.Patch(ctx, patched, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		g.log.add(Entry{Controller: GCControllerName, Namespace: d.Namespace, Name: d.Name, Kind: d.Kind, Op: "orphan",
			Detail: fmt.Sprintf("drop owner %s/%s", o.Kind, o.Name), Err: errText(err)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return g.removeFinalizer(ctx, o, metav1.FinalizerOrphanDependents)
}

// removeFinalizer removes finalizer f from o with an optimistic lock (a conflict is retried by the next pass).
func (g *GCReconciler) removeFinalizer(ctx context.Context, o *metav1.PartialObjectMetadata, f string) error {
	patched := o.DeepCopy()
	patched.Finalizers = slices.DeleteFunc(patched.Finalizers, func(s string) bool { return s == f })
	err := g.Client.Patch(ctx, patched, client.MergeFromWithOptions(o.DeepCopy(), client.MergeFromWithOptimisticLock{}))
	g.log.add(Entry{Controller: GCControllerName, Namespace: o.Namespace, Name: o.Name, Kind: o.Kind, Op: "remove-finalizer",
		Detail: f, Err: errText(err)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
