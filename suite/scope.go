package suite

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// scopes says which Case each object belongs to. A namespaced object belongs to the Case of its namespace.
// A cluster-scoped object belongs to the Case that claimed it, for as long as that Case runs; it is claimed
// at its create (or server-side apply) by the Case's client, by a reconcile pass of a request that belongs
// to a Case, or by any writer when one of its owner references names an object the Case claimed; and when
// the event stream first sees an object whose owner the Case claimed (an object a client ensemble does not
// record created). The Case's cleanup deletes what it claimed and releases the claims
// (docs/architecture.md, "Cluster-scoped objects"). Safe for concurrent use.
type scopes struct {
	mu sync.RWMutex
	// byKey is the claim of each cluster-scoped object, by "Kind/name".
	byKey map[string]*claim
	// byUID is the Case namespace of each claimed object whose uid is known.
	byUID map[types.UID]string
}

// claim is one cluster-scoped object a Case claimed.
type claim struct {
	ns   string
	gvk  schema.GroupVersionKind
	name string
	uid  types.UID
}

func newScopes() *scopes { return &scopes{byKey: map[string]*claim{}, byUID: map[types.UID]string{}} }

// claimFor records that the cluster-scoped object of gvk and name belongs to the Case of namespace ns. An
// object another Case claimed keeps its claim: a name is one object cluster-wide, and the first Case to
// create it is the one that made it.
func (sc *scopes) claimFor(ns string, gvk schema.GroupVersionKind, name string) {
	if ns == "" || name == "" {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, ok := sc.byKey[gvk.Kind+"/"+name]; !ok {
		sc.byKey[gvk.Kind+"/"+name] = &claim{ns: ns, gvk: gvk, name: name}
	}
}

// ownersScope is the Case namespace of the first owner of refs that a Case claimed, or "".
func (sc *scopes) ownersScope(refs []metaOwner) string {
	sc.mu.RLock()
	defer sc.mu.RUnlock()
	for _, r := range refs {
		if ns := sc.byUID[r.UID]; ns != "" {
			return ns
		}
		if cl := sc.byKey[r.Kind+"/"+r.Name]; cl != nil {
			return cl.ns
		}
	}
	return ""
}

// metaOwner is the part of an owner reference a claim is found by.
type metaOwner struct {
	Kind, Name string
	UID        types.UID
}

// owners returns obj's owner references as metaOwners.
func owners(obj client.Object) []metaOwner {
	var out []metaOwner
	for _, r := range obj.GetOwnerReferences() {
		out = append(out, metaOwner{Kind: r.Kind, Name: r.Name, UID: r.UID})
	}
	return out
}

// observed is called by the event stream for each cluster-scoped object it sees: it learns the uid of a
// claimed object, and claims an unclaimed one whose owner a Case claimed. It returns the object's scope.
func (sc *scopes) observed(gvk schema.GroupVersionKind, obj client.Object) string {
	ns := sc.of(gvk.Kind, "", obj.GetName())
	if ns == "" {
		if ns = sc.ownersScope(owners(obj)); ns == "" {
			return ""
		}
		sc.claimFor(ns, gvk, obj.GetName())
		ns = sc.of(gvk.Kind, "", obj.GetName())
	}
	sc.mu.Lock()
	if cl := sc.byKey[gvk.Kind+"/"+obj.GetName()]; cl != nil && cl.uid != obj.GetUID() {
		delete(sc.byUID, cl.uid)
		cl.uid = obj.GetUID()
		sc.byUID[cl.uid] = cl.ns
	}
	sc.mu.Unlock()
	return ns
}

// of is the Case namespace an object of kind belongs to: ns itself for a namespaced object, the claiming
// Case's namespace for a claimed cluster-scoped one, else "".
func (sc *scopes) of(kind, ns, name string) string {
	if ns != "" {
		return ns
	}
	sc.mu.RLock()
	defer sc.mu.RUnlock()
	if cl := sc.byKey[kind+"/"+name]; cl != nil {
		return cl.ns
	}
	return ""
}

// ofRequest is the Case namespace a reconcile request belongs to. A request names no kind, so a
// cluster-scoped request belongs to the Case that claimed an object of that name, of whichever kind.
func (sc *scopes) ofRequest(req types.NamespacedName) string {
	if req.Namespace != "" {
		return req.Namespace
	}
	sc.mu.RLock()
	defer sc.mu.RUnlock()
	for _, cl := range sc.byKey {
		if cl.name == req.Name {
			return cl.ns
		}
	}
	return ""
}

// claimed returns the cluster-scoped objects the Case of namespace ns claimed, sorted by kind and name.
func (sc *scopes) claimed(ns string) []claim {
	sc.mu.RLock()
	var out []claim
	for _, cl := range sc.byKey {
		if cl.ns == ns {
			out = append(out, *cl)
		}
	}
	sc.mu.RUnlock()
	slices.SortFunc(out, func(a, b claim) int { return cmp.Or(cmp.Compare(a.gvk.Kind, b.gvk.Kind), cmp.Compare(a.name, b.name)) })
	return out
}

// release drops every claim of the Case of namespace ns.
func (sc *scopes) release(ns string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for k, cl := range sc.byKey {
		if cl.ns == ns {
			delete(sc.byKey, k)
			delete(sc.byUID, cl.uid)
		}
	}
}

// claimCreated claims the object of gvk and name (created or applied with no namespace, owned by owners)
// for a Case when its kind is cluster-scoped: for caseNS when a Case's client writes it, else for the Case
// of the reconcile pass the write's context carries, else for the Case that claimed one of its owners.
func (s *Suite) claimCreated(ctx context.Context, caseNS string, gvk schema.GroupVersionKind, name string, owners []metaOwner) {
	if !s.clusterScoped(gvk) {
		return
	}
	ns := caseNS
	if p := passFrom(ctx); ns == "" && p != nil {
		ns = p.scope
	}
	if ns == "" {
		ns = s.rec.scopes.ownersScope(owners)
	}
	s.rec.scopes.claimFor(ns, gvk, name)
}

// clusterScoped reports whether the API server serves gvk cluster-scoped; an unknown kind is not.
func (s *Suite) clusterScoped(gvk schema.GroupVersionKind) bool {
	if gvk.Kind == "" || s.Client == nil {
		return false
	}
	m, err := s.mapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil && m.Scope.Name() == meta.RESTScopeNameRoot
}

// gvkOfKind returns a group, version and kind of the scheme's with this kind (the first in sorted order
// when groups share a kind name); zero when the scheme has none.
func (s *Suite) gvkOfKind(kind string) schema.GroupVersionKind {
	var found []schema.GroupVersionKind
	if s.scheme != nil {
		for gvk := range s.scheme.AllKnownTypes() {
			if gvk.Kind == kind {
				found = append(found, gvk)
			}
		}
	}
	if len(found) == 0 {
		return schema.GroupVersionKind{}
	}
	return slices.MinFunc(found, func(a, b schema.GroupVersionKind) int { return cmp.Compare(a.String(), b.String()) })
}

// objectNamespace is the namespace the object kind/name of the Case of namespace ns lives in: ns, or ""
// when kind is cluster-scoped (a perturbation point names its object by kind and name alone).
func (s *Suite) objectNamespace(kind, ns string) string {
	if s.clusterScoped(s.gvkOfKind(kind)) {
		return ""
	}
	return ns
}
