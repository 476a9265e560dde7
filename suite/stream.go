package suite

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Change is one observed change of a watched object: its creation, its deletion, or an update that changed
// at least one field once resourceVersion, managedFields and timestamps are set aside.
type Change struct {
	// Seq orders changes in the order the stream saw them, from 1.
	Seq int64
	// Time is when the stream saw the change.
	Time time.Time
	// Type says whether the object appeared, changed or went.
	Type ChangeType
	// Kind, Namespace and Name identify the object.
	Kind, Namespace, Name string
	// ResourceVersion is the object's resourceVersion after the change (the etcd revision that made it).
	ResourceVersion string
	// Fields lists the leaf fields that changed, by path (e.g. status.podRoles.pod-0,
	// status.conditions[type=Available].status); empty for Added and Deleted.
	Fields []FieldChange

	// scope is the namespace of the Case the object belongs to (see scopes), "" for none.
	scope string
}

// ChangeType is the kind of a Change.
type ChangeType string

// The types of Change.
const (
	Added    ChangeType = "Added"
	Modified ChangeType = "Modified"
	Deleted  ChangeType = "Deleted"
)

// FieldChange is one leaf field's transition; Old or New is "<absent>" when the field did not or no longer
// exist.
type FieldChange struct {
	Path, Old, New string
}

// String renders the change on one line.
func (c Change) String() string {
	var f []string
	for _, fc := range c.Fields {
		f = append(f, fmt.Sprintf("%s: %s -> %s", fc.Path, fc.Old, fc.New))
	}
	return fmt.Sprintf("#%d %s %s %s/%s rv=%s %s", c.Seq, c.Time.Format("15:04:05.000"), c.Type, c.Kind, key(c.Namespace, c.Name), c.ResourceVersion, strings.Join(f, "; "))
}

const absent = "<absent>"

// stream watches the kinds given in Options.WatchKinds across all namespaces and keeps every Change.
// Safe for concurrent use; queries return copies.
type stream struct {
	mu     sync.Mutex
	log    []Change
	last   map[string]map[string]string
	notify *broadcast
	scheme *runtime.Scheme
	scopes *scopes
}

func newStream(scheme *runtime.Scheme, notify *broadcast, sc *scopes) *stream {
	return &stream{last: map[string]map[string]string{}, notify: notify, scheme: scheme, scopes: sc}
}

// watch registers event handlers for each kind on the cache; the cache must be started by the caller.
func (st *stream) watch(ctx context.Context, c cache.Cache, kinds []client.Object) error {
	for _, k := range kinds {
		gvk, err := apiutil.GVKForObject(k, st.scheme)
		if err != nil {
			return fmt.Errorf("suite: WatchKinds: %T is not in the scheme: add its AddToScheme to Options.Scheme: %w", k, err)
		}
		inf, err := c.GetInformer(ctx, k)
		if err != nil {
			return fmt.Errorf("suite: watching %s: %w (is its CRD in Options.CRDDirectoryPaths or Options.CRDs?)", gvk.Kind, err)
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { st.observe(gvk, Added, o) },
			UpdateFunc: func(_, o any) { st.observe(gvk, Modified, o) },
			DeleteFunc: func(o any) {
				if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				st.observe(gvk, Deleted, o)
			},
		})
		if err != nil {
			return fmt.Errorf("suite: watching %s: %w", gvk.Kind, err)
		}
	}
	return nil
}

func (st *stream) observe(gvk schema.GroupVersionKind, typ ChangeType, o any) {
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	kind := gvk.Kind
	scope := obj.GetNamespace()
	if scope == "" {
		scope = st.scopes.observed(gvk, obj)
	}
	flat := flatten(obj)
	id := kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
	st.mu.Lock()
	prev, had := st.last[id]
	var fields []FieldChange
	switch typ {
	case Deleted:
		delete(st.last, id)
	case Modified, Added:
		st.last[id] = flat
		if had {
			typ = Modified
			fields = diffFlat(prev, flat)
			if len(fields) == 0 {
				st.mu.Unlock()
				return
			}
		} else {
			typ = Added
		}
	}
	ch := Change{Seq: int64(len(st.log) + 1), Time: time.Now(), Type: typ, Kind: kind,
		Namespace: obj.GetNamespace(), Name: obj.GetName(), ResourceVersion: obj.GetResourceVersion(), Fields: fields, scope: scope}
	st.log = append(st.log, ch)
	st.mu.Unlock()
	st.notify.signal()
}

// ChangeFilter selects a Case's changes; a zero field matches anything.
type ChangeFilter struct {
	Kind, Name string
	Type       ChangeType
	// Since keeps changes seen at or after this time.
	Since time.Time
}

func (f ChangeFilter) match(ns string, c Change) bool {
	return ns == c.scope && (f.Kind == "" || f.Kind == c.Kind) &&
		(f.Name == "" || f.Name == c.Name) && (f.Type == "" || f.Type == c.Type) && !c.Time.Before(f.Since)
}

// changes returns the changes in namespace ns that match f, ordered by resourceVersion (the order etcd
// made them in).
func (st *stream) changes(ns string, f ChangeFilter) []Change {
	st.mu.Lock()
	var out []Change
	for _, c := range st.log {
		if f.match(ns, c) {
			out = append(out, c)
		}
	}
	st.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool {
		a, errA := strconv.ParseUint(out[i].ResourceVersion, 10, 64)
		b, errB := strconv.ParseUint(out[j].ResourceVersion, 10, 64)
		if errA != nil || errB != nil || a == b {
			return out[i].Seq < out[j].Seq
		}
		return a < b
	})
	return out
}

// lastSeq is the Seq of the latest change seen in any namespace (0 before the first).
func (st *stream) lastSeq() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return int64(len(st.log))
}

// after returns the changes in namespace ns with Seq above seq, in the order the stream saw them.
func (st *stream) after(ns string, seq int64) []Change {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []Change
	for _, c := range st.log[min(int(seq), len(st.log)):] {
		if c.scope == ns {
			out = append(out, c)
		}
	}
	return out
}

func (st *stream) lastChange(ns string) time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := len(st.log) - 1; i >= 0; i-- {
		if st.log[i].scope == ns {
			return st.log[i].Time
		}
	}
	return time.Time{}
}

func diffFlat(a, b map[string]string) []FieldChange {
	var out []FieldChange
	for k, av := range a {
		bv, ok := b[k]
		if !ok {
			bv = absent
		}
		if av != bv {
			out = append(out, FieldChange{Path: k, Old: av, New: bv})
		}
	}
	for k, bv := range b {
		if _, ok := a[k]; !ok {
			out = append(out, FieldChange{Path: k, Old: absent, New: bv})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
