package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// withWatch lets a plain client.Client stand where the interceptor wants a client.WithWatch; Watch is not
// offered through a recording client.
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, fmt.Errorf("suite: Watch is not available through a recording client")
}

// recordingClient wraps base so that every write is recorded as made by manager. The controller and the pass
// come from the reconcile pass the write's context carries; controller is the fallback outside a pass.
// caseNS is the namespace of the Case whose client this is ("" for a manager's): a cluster-scoped object it
// creates is claimed for that Case (see scopes and claimCreated). Every
// write passes the case's perturbation points first (see perturbation.go), which may answer it with an
// injected error instead of sending it. fence, when not nil, is set once the manager was stopped by a restart
// point: every later write is refused, as a crashed process makes none.
func (s *Suite) recordingClient(base client.Client, manager, controller, caseNS string, fence *atomic.Pointer[perturb.Point]) client.Client {
	scheme := base.Scheme()
	do := func(ctx context.Context, verb Verb, sub string, obj any, owner string, call func() error) error {
		w := Write{Manager: manager, Controller: controller, Verb: verb, Subresource: sub, FieldOwner: owner}
		if p := passFrom(ctx); p != nil {
			w.Pass, w.Controller = p.ID, p.Controller
		}
		w.Kind, w.Namespace, w.Name = describe(scheme, obj)
		if (verb == VerbCreate || verb == VerbApply) && sub == "" && w.Namespace == "" && w.Name != "" {
			s.claimCreated(ctx, caseNS, obj, w.Kind, w.Name)
		}
		w.scope = s.rec.scopes.of(w.Kind, w.Namespace, w.Name)
		if fence != nil {
			if p := fence.Load(); p != nil {
				w.Time, w.Err, w.Point = time.Now(), fmt.Errorf("suite: manager %s was stopped by point %s; a stopped process writes nothing", manager, p), p.String()
				s.rec.addWrite(w)
				return w.Err
			}
		}
		f := s.perturbBefore(&w, base)
		if f.err != nil {
			w.Time, w.Err = time.Now(), f.err
			s.rec.addWrite(w)
			return f.err
		}
		err := call()
		w.Time, w.Err = time.Now(), err
		// A subresource create (pods/binding, pods/eviction) answers with another object: obj keeps the
		// resourceVersion it had, which is not the one the write made. Its uid, like a rejected write's or a
		// delete's, is still the one of the incarnation the writer meant.
		rv, uid := answered(obj)
		w.UID = uid
		if err == nil && verb != VerbDelete && verb != VerbDeleteAllOf && (verb != VerbCreate || sub == "") {
			w.ResourceVersion = rv
		}
		s.rec.addWrite(w)
		s.perturbAfter(w, f)
		return err
	}
	return interceptor.NewClient(withWatch{base}, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return do(ctx, VerbCreate, "", obj, (&client.CreateOptions{}).ApplyOptions(opts).FieldManager, func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return do(ctx, VerbUpdate, "", obj, (&client.UpdateOptions{}).ApplyOptions(opts).FieldManager, func() error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return do(ctx, patchVerb(patch), "", obj, (&client.PatchOptions{}).ApplyOptions(opts).FieldManager, func() error { return c.Patch(ctx, obj, patch, opts...) })
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			return do(ctx, VerbApply, "", applyObject{obj}, (&client.ApplyOptions{}).ApplyOptions(opts).FieldManager, func() error { return c.Apply(ctx, obj, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return do(ctx, VerbDelete, "", obj, "", func() error { return c.Delete(ctx, obj, opts...) })
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			// The call names a namespace, not an object: record it under the namespace, with no name.
			o := (&client.DeleteAllOfOptions{}).ApplyOptions(opts)
			probe := obj.DeepCopyObject().(client.Object)
			probe.SetNamespace(o.Namespace)
			probe.SetName("")
			return do(ctx, VerbDeleteAllOf, "", probe, "", func() error { return c.DeleteAllOf(ctx, obj, opts...) })
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			return do(ctx, VerbCreate, sub, obj, (&client.SubResourceCreateOptions{}).ApplyOptions(opts).FieldManager, func() error { return c.SubResource(sub).Create(ctx, obj, subObj, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return do(ctx, VerbUpdate, sub, obj, (&client.SubResourceUpdateOptions{}).ApplyOptions(opts).FieldManager, func() error { return c.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return do(ctx, patchVerb(patch), sub, obj, (&client.SubResourcePatchOptions{}).ApplyOptions(opts).FieldManager, func() error { return c.SubResource(sub).Patch(ctx, obj, patch, opts...) })
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			return do(ctx, VerbApply, sub, applyObject{obj}, (&client.SubResourceApplyOptions{}).ApplyOpts(opts).FieldManager, func() error { return c.SubResource(sub).Apply(ctx, obj, opts...) })
		},
	})
}

func patchVerb(p client.Patch) Verb {
	if p.Type() == "application/apply-patch+yaml" {
		return VerbApply
	}
	return VerbPatch
}

// applyObject lets describe read kind and key from an apply configuration.
type applyObject struct{ runtime.ApplyConfiguration }

// describe returns kind, namespace and name of a typed object, an unstructured object or an apply
// configuration; unknown parts are left empty.
func describe(scheme *runtime.Scheme, obj any) (kind, ns, name string) {
	if a, ok := obj.(applyObject); ok {
		type named interface {
			GetName() *string
			GetNamespace() *string
			GetKind() *string
		}
		type plain interface {
			GetName() string
			GetNamespace() string
			GetKind() string
		}
		switch v := a.ApplyConfiguration.(type) {
		case named:
			return deref(v.GetKind()), deref(v.GetNamespace()), deref(v.GetName())
		case plain:
			return v.GetKind(), v.GetNamespace(), v.GetName()
		}
		return "", "", ""
	}
	if o, ok := obj.(client.Object); ok {
		ns, name = o.GetNamespace(), o.GetName()
	}
	if ro, ok := obj.(runtime.Object); ok {
		if gvk, err := apiutil.GVKForObject(ro, scheme); err == nil {
			kind = gvk.Kind
		}
	}
	return kind, ns, name
}

// answered reads the resourceVersion and uid of obj after a write: the client writes the API server's
// response back into the object (or the apply configuration) it was given, so after a rejected write they
// are the ones the writer sent (often empty).
func answered(obj any) (string, types.UID) {
	if o, ok := obj.(client.Object); ok {
		return o.GetResourceVersion(), o.GetUID()
	}
	a, ok := obj.(applyObject)
	if !ok {
		return "", ""
	}
	// An apply configuration made from an unstructured object (client.ApplyConfigurationFromUnstructured)
	// answers directly; a generated one is read through its JSON.
	type plain interface {
		GetResourceVersion() string
		GetUID() types.UID
	}
	if p, ok := a.ApplyConfiguration.(plain); ok {
		return p.GetResourceVersion(), p.GetUID()
	}
	b, err := json.Marshal(a.ApplyConfiguration)
	if err != nil {
		return "", ""
	}
	var m struct {
		Metadata struct {
			ResourceVersion string    `json:"resourceVersion"`
			UID             types.UID `json:"uid"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(b, &m)
	return m.Metadata.ResourceVersion, m.Metadata.UID
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
