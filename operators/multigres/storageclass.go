package multigres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
)

// Reasons of the StorageClassValid condition.
const (
	reasonStorageClassesFound   = "StorageClassesFound"
	reasonStorageClassNotFound  = "StorageClassNotFound"
	messageAllStorageClassesOK  = "all storage classes exist"
	messagePoolStorageClassesOK = "pool storage classes exist"
)

// poolStorageClasses lists the distinct non-empty storage classes of pools in visiting order. With
// mapOrder (MG-CONDITION-MAP-ORDER live) the pools are visited in Go map order, which varies from call to call;
// otherwise in sorted pool-name order.
func poolStorageClasses(pools map[string]mgv1.PoolSpec, mapOrder bool) []string {
	var classes []string
	add := func(p mgv1.PoolSpec) {
		if p.StorageClass != "" && !slices.Contains(classes, p.StorageClass) {
			classes = append(classes, p.StorageClass)
		}
	}
	if mapOrder {
		// MG-CONDITION-MAP-ORDER (defective): map iteration order is random, so the message built from this
		// list names missing classes in varying order and the condition is rewritten on every pass.
		for _, p := range pools {
			add(p)
		}
		return classes
	}
	for _, name := range sortedKeys(pools) {
		add(pools[name])
	}
	return classes
}

// missingStorageClasses returns the names in names (order kept) that are not storage.k8s.io/v1 StorageClasses.
func missingStorageClasses(ctx context.Context, c client.Client, names []string) ([]string, error) {
	var missing []string
	for _, n := range names {
		err := c.Get(ctx, client.ObjectKey{Name: n}, &storagev1.StorageClass{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, n)
		case err != nil:
			return nil, fmt.Errorf("get storageclass %s: %w", n, err)
		}
	}
	return missing, nil
}

// storageClassCondition is the single StorageClassValid verdict (MG-STORAGECLASS-SPLIT-WRITERS fixed): True
// when missing is empty, else False naming the missing classes in the given order.
func storageClassCondition(missing []string, generation int64) metav1.Condition {
	if len(missing) == 0 {
		return metav1.Condition{Type: mgv1.ConditionStorageClassValid, Status: metav1.ConditionTrue,
			Reason: reasonStorageClassesFound, Message: messageAllStorageClassesOK, ObservedGeneration: generation}
	}
	return metav1.Condition{Type: mgv1.ConditionStorageClassValid, Status: metav1.ConditionFalse,
		Reason: reasonStorageClassNotFound, ObservedGeneration: generation,
		Message: "storage class(es) not found: " + strings.Join(missing, ", ")}
}

// backupStorageClassCondition is the backup writer's own verdict (MG-STORAGECLASS-SPLIT-WRITERS live).
func backupStorageClassCondition(class string, missing bool, generation int64) metav1.Condition {
	if missing {
		return metav1.Condition{Type: mgv1.ConditionStorageClassValid, Status: metav1.ConditionFalse,
			Reason: reasonStorageClassNotFound, ObservedGeneration: generation,
			Message: fmt.Sprintf("backup storage class not found: %s", class)}
	}
	return metav1.Condition{Type: mgv1.ConditionStorageClassValid, Status: metav1.ConditionTrue,
		Reason: reasonStorageClassesFound, ObservedGeneration: generation,
		Message: fmt.Sprintf("backup storage class %s exists", class)}
}

// poolStorageClassCondition is the pool writer's own verdict (MG-STORAGECLASS-SPLIT-WRITERS live).
func poolStorageClassCondition(missing []string, generation int64) metav1.Condition {
	if len(missing) == 0 {
		return metav1.Condition{Type: mgv1.ConditionStorageClassValid, Status: metav1.ConditionTrue,
			Reason: reasonStorageClassesFound, Message: messagePoolStorageClassesOK, ObservedGeneration: generation}
	}
	return metav1.Condition{Type: mgv1.ConditionStorageClassValid, Status: metav1.ConditionFalse,
		Reason: reasonStorageClassNotFound, ObservedGeneration: generation,
		Message: "pool storage class(es) not found: " + strings.Join(missing, ", ")}
}

// guardPayload builds the guard's status apply payload for cond.
//
// MG-STATUS-SSA-ZERO-FIELDS live: a typed Shard literal that sets only status.conditions, serialised as a typed
// object is: the non-omitempty orchReady and poolsReady go out as false (and an empty spec rides along, which the
// status subresource ignores). Applied with force, those zero values take the fields from updateStatus, which
// takes them back on the next pass: the status flips forever.
// Fixed: an unstructured payload holding only status.conditions with the one condition.
func guardPayload(shard *mgv1.Shard, cond metav1.Condition, zeroFields bool) (*unstructured.Unstructured, error) {
	if zeroFields {
		lit := &mgv1.Shard{
			TypeMeta:   metav1.TypeMeta{APIVersion: mgv1.GroupVersion.String(), Kind: gvkShard.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: shard.Name, Namespace: shard.Namespace},
			Status:     mgv1.ShardStatus{Conditions: []metav1.Condition{cond}},
		}
		m, err := toMap(lit)
		if err != nil {
			return nil, err
		}
		return &unstructured.Unstructured{Object: m}, nil
	}
	cm, err := toMap(&cond)
	if err != nil {
		return nil, err
	}
	return statusPayload(gvkShard, shard.Namespace, shard.Name, map[string]any{"conditions": []any{cm}}), nil
}

// writeStorageClassValid applies cond as the guard (field owner multigres-resource-handler-guard, forced),
// skipped when the payload would change no value of the live status. On a write, shard is replaced by the
// server's answer, so that a second writer in the same pass compares against it.
func (r *ShardReconciler) writeStorageClassValid(ctx context.Context, shard *mgv1.Shard, cond metav1.Condition, opts Options) error {
	cond = carryCondition(shard.Status.Conditions, cond, metav1.NewTime(opts.Now()))
	u, err := guardPayload(shard, cond, opts.IsLive(DefectStatusSSAZeroFields))
	if err != nil {
		return err
	}
	live, err := toMap(&shard.Status)
	if err != nil {
		return err
	}
	if subsetEqual(u.Object["status"], live) {
		return nil
	}
	if err := applyStatus(ctx, r.Client, u, FieldOwnerGuard); err != nil {
		return fmt.Errorf("apply StorageClassValid: %w", err)
	}
	fresh := &mgv1.Shard{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, fresh); err != nil {
		return err
	}
	*shard = *fresh
	return nil
}
