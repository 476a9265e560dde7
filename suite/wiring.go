package suite

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Wiring is what ManagerOptions.Register receives: for each controller it sets up, the client the controller
// must use for its writes and the wrapper its reconciler must be registered through. Operators never import
// suite: they take a client.Client and a reconcile.Reconciler through their SetupWithManagerReconciler seam.
type Wiring struct {
	s       *Suite
	manager string
	ungated bool
	base    client.Client
}

// Manager is the name of the manager being wired (ManagerOptions.Name).
func (w Wiring) Manager() string { return w.manager }

// Client returns a client for the named controller: reads go to the manager's client (its cache), and every
// write (create, update, patch, apply, delete, on the object or a subresource) is recorded as made by
// manager/controller in the reconcile pass of the context it was called with.
func (w Wiring) Client(controller string) client.Client {
	return w.s.recordingClient(w.base, w.manager, controller)
}

// Reconciler wraps r for the named controller. The wrapper:
//   - refuses a request whose namespace no Case admitted (recorded as a gated Pass, r not called), unless
//     the manager runs ungated;
//   - records every pass (request, error, requeue) in the Recorder and puts it in the context so the
//     controller's writes are attributed to it;
//   - shortens a RequeueAfter above Options.RequeueClamp to the clamp, keeping the asked value in the Pass.
func (w Wiring) Reconciler(controller string, r reconcile.Reconciler) reconcile.Reconciler {
	return &wrappedReconciler{s: w.s, manager: w.manager, controller: controller, ungated: w.ungated, inner: r}
}

type wrappedReconciler struct {
	s                   *Suite
	manager, controller string
	ungated             bool
	inner               reconcile.Reconciler
}

func (r *wrappedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := r.s.rec.beginPass(r.manager, r.controller, req)
	if !r.ungated && !r.s.gate.Admitted(req.Namespace) {
		r.s.rec.endPass(p, true, nil, 0, 0)
		return ctrl.Result{}, nil
	}
	res, err := r.inner.Reconcile(context.WithValue(ctx, passCtxKey{}, p), req)
	asked := res.RequeueAfter
	if clamp := r.s.opts.RequeueClamp; clamp > 0 && res.RequeueAfter > clamp {
		res.RequeueAfter = clamp
	}
	r.s.rec.endPass(p, false, err, res.RequeueAfter, asked)
	return res, err
}

// withWatch lets a plain client.Client stand where the interceptor wants a client.WithWatch; Watch is not
// offered to controllers through a recording client.
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, fmt.Errorf("suite: Watch is not available through a recording client")
}

func (s *Suite) recordingClient(base client.Client, manager, controller string) client.Client {
	scheme := base.Scheme()
	rec := func(ctx context.Context, verb, sub string, obj any, owner, patchType string, err error) {
		w := Write{Time: time.Now(), Manager: manager, Controller: controller, Verb: verb, Subresource: sub, FieldOwner: owner, PatchType: patchType}
		if p := passFrom(ctx); p != nil {
			w.Pass = p.ID
		}
		w.Kind, w.Namespace, w.Name = describe(scheme, obj)
		if err != nil {
			w.Err = err.Error()
		}
		s.rec.addWrite(w)
	}
	return interceptor.NewClient(withWatch{base}, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, obj, opts...)
			rec(ctx, "create", "", obj, (&client.CreateOptions{}).ApplyOptions(opts).FieldManager, "", err)
			return err
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			err := c.Update(ctx, obj, opts...)
			rec(ctx, "update", "", obj, (&client.UpdateOptions{}).ApplyOptions(opts).FieldManager, "", err)
			return err
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			err := c.Patch(ctx, obj, patch, opts...)
			rec(ctx, patchVerb(patch), "", obj, (&client.PatchOptions{}).ApplyOptions(opts).FieldManager, string(patch.Type()), err)
			return err
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			err := c.Apply(ctx, obj, opts...)
			rec(ctx, "apply", "", applyObject{obj}, (&client.ApplyOptions{}).ApplyOptions(opts).FieldManager, "application/apply-patch+yaml", err)
			return err
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			err := c.Delete(ctx, obj, opts...)
			rec(ctx, "delete", "", obj, "", "", err)
			return err
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			err := c.DeleteAllOf(ctx, obj, opts...)
			o := (&client.DeleteAllOfOptions{}).ApplyOptions(opts)
			k, _, _ := describe(scheme, obj)
			w := Write{Time: time.Now(), Manager: manager, Controller: controller, Verb: "deleteallof", Kind: k, Namespace: o.Namespace}
			if p := passFrom(ctx); p != nil {
				w.Pass = p.ID
			}
			if err != nil {
				w.Err = err.Error()
			}
			s.rec.addWrite(w)
			return err
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			err := c.SubResource(sub).Create(ctx, obj, subObj, opts...)
			rec(ctx, "create", sub, obj, (&client.SubResourceCreateOptions{}).ApplyOptions(opts).FieldManager, "", err)
			return err
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			rec(ctx, "update", sub, obj, (&client.SubResourceUpdateOptions{}).ApplyOptions(opts).FieldManager, "", err)
			return err
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			err := c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			rec(ctx, patchVerb(patch), sub, obj, (&client.SubResourcePatchOptions{}).ApplyOptions(opts).FieldManager, string(patch.Type()), err)
			return err
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			err := c.SubResource(sub).Apply(ctx, obj, opts...)
			rec(ctx, "apply", sub, applyObject{obj}, (&client.SubResourceApplyOptions{}).ApplyOpts(opts).FieldManager, "application/apply-patch+yaml", err)
			return err
		},
	})
}

func patchVerb(p client.Patch) string {
	if p.Type() == "application/apply-patch+yaml" {
		return "apply"
	}
	return "patch"
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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
