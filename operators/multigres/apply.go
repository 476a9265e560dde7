package multigres

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
)

// GVKs of the kinds this operator writes by server-side apply.
var (
	gvkCluster    = mgv1.GroupVersion.WithKind("MultigresCluster")
	gvkTableGroup = mgv1.GroupVersion.WithKind("TableGroup")
	gvkShard      = mgv1.GroupVersion.WithKind("Shard")
)

// toMap serialises a typed value as the API server would see it: encoding/json rules (omitempty honoured,
// zero values of non-omitempty fields kept).
func toMap(v any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(v)
}

// specPayload turns a typed object into an apply payload for its main resource: apiVersion/kind from gvk,
// status and metadata.creationTimestamp dropped.
func specPayload(obj client.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := toMap(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// statusPayload is an apply payload for the status subresource holding exactly status (a map).
func statusPayload(gvk schema.GroupVersionKind, namespace, name string, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// applySpec server-side-applies obj (spec and metadata) with force under owner.
func applySpec(ctx context.Context, c client.Client, obj client.Object, gvk schema.GroupVersionKind, owner string) error {
	u, err := specPayload(obj, gvk)
	if err != nil {
		return err
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership)
}

// applyStatus server-side-applies u to the status subresource with force under owner.
func applyStatus(ctx context.Context, c client.Client, u *unstructured.Unstructured, owner string) error {
	return c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner),
		client.ForceOwnership)
}

// carryCondition returns c with the lastTransitionTime of the same-type condition in existing when the status is
// unchanged, else now.
func carryCondition(existing []metav1.Condition, c metav1.Condition, now metav1.Time) metav1.Condition {
	if old := meta.FindStatusCondition(existing, c.Type); old != nil && old.Status == c.Status &&
		!old.LastTransitionTime.IsZero() {
		c.LastTransitionTime = old.LastTransitionTime
	} else {
		c.LastTransitionTime = now
	}
	return c
}

// subsetEqual reports whether every field set in payload already has that value in live. Lists of objects
// keyed by "type" (conditions) are compared entry by entry by type; other values must be deeply equal.
// It answers "would applying payload change any value", which is how a writer skips an unchanged write.
func subsetEqual(payload, live any) bool {
	switch p := payload.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return len(p) == 0 && live == nil
		}
		for k, pv := range p {
			if !subsetEqual(pv, l[k]) {
				return false
			}
		}
		return true
	case []any:
		l, _ := live.([]any)
		if keyed(p) && keyed(l) {
			for _, pe := range p {
				pm := pe.(map[string]any)
				var match any
				for _, le := range l {
					if le.(map[string]any)["type"] == pm["type"] {
						match = le
						break
					}
				}
				if match == nil || !subsetEqual(pm, match) {
					return false
				}
			}
			return true
		}
		return reflect.DeepEqual(p, l) || (len(p) == 0 && len(l) == 0)
	default:
		return reflect.DeepEqual(payload, live)
	}
}

// keyed reports whether every element of l is an object with a string "type".
func keyed(l []any) bool {
	for _, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		if _, ok := m["type"].(string); !ok {
			return false
		}
	}
	return true
}

// ensureFinalizer adds finalizer to obj with an optimistic-lock merge patch under owner; a no-op when present.
func ensureFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer, owner string) error {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(owner)); err != nil {
		return fmt.Errorf("add finalizer %s: %w", finalizer, err)
	}
	return nil
}

// removeFinalizer removes finalizer from obj with an optimistic-lock merge patch under owner; a no-op when absent.
func removeFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer, owner string) error {
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(owner)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer %s: %w", finalizer, err))
	}
	return nil
}

// markPendingDeletion sets AnnotationPendingDeletion on obj with a merge patch under owner; a no-op when set.
func markPendingDeletion(ctx context.Context, c client.Client, obj client.Object, owner string) error {
	if pendingDeletion(obj) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationPendingDeletion] = "true"
	obj.SetAnnotations(ann)
	return client.IgnoreNotFound(c.Patch(ctx, obj, client.MergeFrom(orig), client.FieldOwner(owner)))
}

// pendingDeletion reports whether obj carries AnnotationPendingDeletion.
func pendingDeletion(obj client.Object) bool {
	_, ok := obj.GetAnnotations()[AnnotationPendingDeletion]
	return ok
}

// ownedBy reports whether owner is the controller owner of obj.
func ownedBy(obj, owner client.Object) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == owner.GetUID()
}

// controllerRef is a controller owner reference to owner (kind gvk) with blockOwnerDeletion.
func controllerRef(owner client.Object, gvk schema.GroupVersionKind) metav1.OwnerReference {
	return *metav1.NewControllerRef(owner, gvk)
}
