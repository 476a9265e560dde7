package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// withWatch lets a plain client.Client stand where the interceptor wants a client.WithWatch; Watch is not
// offered through a recording client.
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, fmt.Errorf("suite: Watch is not available through a recording client")
}

// recordingClient wraps base so that every write is recorded as made by manager. The controller and the pass
// come from the reconcile pass the write's context carries; controller is the fallback outside a pass.
func (s *Suite) recordingClient(base client.Client, manager, controller string) client.Client {
	scheme := base.Scheme()
	rec := func(ctx context.Context, verb Verb, sub string, obj any, owner string, err error) {
		w := Write{Time: time.Now(), Manager: manager, Controller: controller, Verb: verb, Subresource: sub, FieldOwner: owner, Err: err}
		if p := passFrom(ctx); p != nil {
			w.Pass, w.Controller = p.ID, p.Controller
		}
		w.Kind, w.Namespace, w.Name = describe(scheme, obj)
		// A subresource create (pods/binding, pods/eviction) answers with another object: obj keeps the
		// resourceVersion it had, which is not the one the write made.
		if err == nil && verb != VerbDelete && verb != VerbDeleteAllOf && (verb != VerbCreate || sub == "") {
			w.ResourceVersion = resourceVersion(obj)
		}
		s.rec.addWrite(w)
	}
	return interceptor.NewClient(withWatch{base}, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, obj, opts...)
			rec(ctx, VerbCreate, "", obj, (&client.CreateOptions{}).ApplyOptions(opts).FieldManager, err)
			return err
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			err := c.Update(ctx, obj, opts...)
			rec(ctx, VerbUpdate, "", obj, (&client.UpdateOptions{}).ApplyOptions(opts).FieldManager, err)
			return err
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			err := c.Patch(ctx, obj, patch, opts...)
			rec(ctx, patchVerb(patch), "", obj, (&client.PatchOptions{}).ApplyOptions(opts).FieldManager, err)
			return err
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			err := c.Apply(ctx, obj, opts...)
			rec(ctx, VerbApply, "", applyObject{obj}, (&client.ApplyOptions{}).ApplyOptions(opts).FieldManager, err)
			return err
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			err := c.Delete(ctx, obj, opts...)
			rec(ctx, VerbDelete, "", obj, "", err)
			return err
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			err := c.DeleteAllOf(ctx, obj, opts...)
			// The call names a namespace, not an object: record it under the namespace, with no name.
			o := (&client.DeleteAllOfOptions{}).ApplyOptions(opts)
			probe := obj.DeepCopyObject().(client.Object)
			probe.SetNamespace(o.Namespace)
			probe.SetName("")
			rec(ctx, VerbDeleteAllOf, "", probe, "", err)
			return err
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			err := c.SubResource(sub).Create(ctx, obj, subObj, opts...)
			rec(ctx, VerbCreate, sub, obj, (&client.SubResourceCreateOptions{}).ApplyOptions(opts).FieldManager, err)
			return err
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			rec(ctx, VerbUpdate, sub, obj, (&client.SubResourceUpdateOptions{}).ApplyOptions(opts).FieldManager, err)
			return err
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			err := c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			rec(ctx, patchVerb(patch), sub, obj, (&client.SubResourcePatchOptions{}).ApplyOptions(opts).FieldManager, err)
			return err
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			err := c.SubResource(sub).Apply(ctx, obj, opts...)
			rec(ctx, VerbApply, sub, applyObject{obj}, (&client.SubResourceApplyOptions{}).ApplyOpts(opts).FieldManager, err)
			return err
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

// resourceVersion reads the resourceVersion the API server answered a write with: the client writes the
// response back into the object (or the apply configuration) it was given.
func resourceVersion(obj any) string {
	if o, ok := obj.(client.Object); ok {
		return o.GetResourceVersion()
	}
	a, ok := obj.(applyObject)
	if !ok {
		return ""
	}
	if u, ok := a.ApplyConfiguration.(interface{ GetResourceVersion() string }); ok {
		return u.GetResourceVersion()
	}
	b, err := json.Marshal(a.ApplyConfiguration)
	if err != nil {
		return ""
	}
	var m struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(b, &m)
	return m.Metadata.ResourceVersion
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
