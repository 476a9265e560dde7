package multigres

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
)

// Reasons of the PoolerDataReady pod condition: the first failing posture check, or PostureReady.
const (
	// ReasonPostureReady: every posture check passes (condition True).
	ReasonPostureReady = "PostureReady"
	// ReasonPoolerNotRegistered: no pooler in topology has the pod as hostname.
	ReasonPoolerNotRegistered = "PoolerNotRegistered"
	// ReasonPoolerShutdown: the pod's pooler is SHUTDOWN (drained or pruned).
	ReasonPoolerShutdown = "PoolerShutdown"
	// ReasonPoolerNotInitialized: the pooler has not initialised its data directory.
	ReasonPoolerNotInitialized = "PoolerNotInitialized"
	// ReasonPostgresNotAcceptingConnections: Postgres behind the pooler does not accept connections.
	ReasonPostgresNotAcceptingConnections = "PostgresNotAcceptingConnections"
	// ReasonNotCohortEligible: the pooler may not join the durability cohort.
	ReasonNotCohortEligible = "NotCohortEligible"
	// ReasonNotInCommittedCohort: the pooler is not a member of the committed cohort.
	ReasonNotInCommittedCohort = "NotInCommittedCohort"
)

// posture says whether a pool pod whose pooler is pl (nil = not registered) is ready for traffic, and the first
// failing reason: registered, serving, initialized, accepting connections, cohort-eligible, in the committed
// cohort.
func posture(pl *topo.Pooler) (ready bool, reason string) {
	switch {
	case pl == nil:
		return false, ReasonPoolerNotRegistered
	case pl.Lifecycle == topo.LifecycleShutdown:
		return false, ReasonPoolerShutdown
	case !pl.Initialized:
		return false, ReasonPoolerNotInitialized
	case !pl.AcceptingConnections:
		return false, ReasonPostgresNotAcceptingConnections
	case !pl.CohortEligible:
		return false, ReasonNotCohortEligible
	case !pl.InCommittedCohort:
		return false, ReasonNotInCommittedCohort
	}
	return true, ReasonPostureReady
}

// poolersByHost indexes poolers by hostname (pod name), preferring a serving record over a shut-down one.
func poolersByHost(poolers []topo.Pooler) map[string]*topo.Pooler {
	out := map[string]*topo.Pooler{}
	for i := range poolers {
		pl := &poolers[i]
		if old := out[pl.Hostname]; old == nil || old.Lifecycle == topo.LifecycleShutdown {
			out[pl.Hostname] = pl
		}
	}
	return out
}

// desiredPodRoles maps each pod of pods whose serving pooler has a role to that role.
func desiredPodRoles(pods []corev1.Pod, byHost map[string]*topo.Pooler) map[string]string {
	roles := map[string]string{}
	for i := range pods {
		if pl := byHost[pods[i].Name]; pl != nil && pl.Role != "" && pl.Lifecycle != topo.LifecycleShutdown {
			roles[pods[i].Name] = pl.Role
		}
	}
	return roles
}

// patchPodRoles writes status.podRoles = roles with a merge patch on the status subresource.
//
// MG-UNNAMED-FIELD-OWNER live: the patch carries no field owner, so the API server names the manager after the
// client's User-Agent, and each podRoles entry is owned by that manager and by multigres-resource-handler (which
// applies podRoles in updateStatus). Fixed: field owner multigres-resource-handler.
func (r *ShardReconciler) patchPodRoles(ctx context.Context, shard *mgv1.Shard, roles map[string]string, opts Options) error {
	orig := shard.DeepCopy()
	if len(roles) == 0 {
		shard.Status.PodRoles = nil
	} else {
		shard.Status.PodRoles = maps.Clone(roles)
	}
	var popts []client.SubResourcePatchOption
	if !opts.IsLive(DefectUnnamedFieldOwner) {
		popts = append(popts, client.FieldOwner(FieldOwnerResourceHandler))
	}
	if err := r.Client.Status().Patch(ctx, shard, client.MergeFrom(orig), popts...); err != nil {
		return fmt.Errorf("patch podRoles: %w", err)
	}
	return nil
}

// setPoolerDataReady writes the PoolerDataReady pod condition, skipped when status and reason are unchanged.
// Reports whether it wrote.
//
// Fixed: server-side apply of only that condition on pods/status, field owner
// multigres-resource-handler-readiness, forced. MG-UNNAMED-FIELD-OWNER live: a strategic-merge patch of pods/status
// without a field owner (the API server names the manager after the User-Agent).
func (r *ShardReconciler) setPoolerDataReady(ctx context.Context, pod *corev1.Pod, ready bool, reason string, opts Options) (bool, error) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	old := podCondition(pod, PodConditionPoolerDataReady)
	if old != nil && old.Status == status && old.Reason == reason {
		return false, nil
	}
	ltt := metav1.NewTime(opts.Now())
	if old != nil && old.Status == status && !old.LastTransitionTime.IsZero() {
		ltt = old.LastTransitionTime
	}
	cond := corev1.PodCondition{Type: PodConditionPoolerDataReady, Status: status, Reason: reason,
		Message: "pooler posture: " + reason, LastTransitionTime: ltt}

	if opts.IsLive(DefectUnnamedFieldOwner) {
		orig := pod.DeepCopy()
		if old != nil {
			*old = cond
		} else {
			pod.Status.Conditions = append(pod.Status.Conditions, cond)
		}
		if err := r.Client.Status().Patch(ctx, pod, client.StrategicMergeFrom(orig)); err != nil {
			return false, client.IgnoreNotFound(fmt.Errorf("patch pod %s PoolerDataReady: %w", pod.Name, err))
		}
		return true, nil
	}

	cm, err := toMap(&cond)
	if err != nil {
		return false, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{cm}}}}
	u.SetAPIVersion("v1")
	u.SetKind("Pod")
	u.SetNamespace(pod.Namespace)
	u.SetName(pod.Name)
	if err := applyStatus(ctx, r.Client, u, FieldOwnerReadiness); err != nil {
		return false, client.IgnoreNotFound(fmt.Errorf("apply pod %s PoolerDataReady: %w", pod.Name, err))
	}
	return true, nil
}

// setDrainState sets the drain annotation of pod to state (merge patch, field owner multigres-resource-handler).
func (r *ShardReconciler) setDrainState(ctx context.Context, pod *corev1.Pod, state string) error {
	orig := pod.DeepCopy()
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationDrainState] = state
	if err := r.Client.Patch(ctx, pod, client.MergeFrom(orig), client.FieldOwner(FieldOwnerResourceHandler)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("set drain state of %s to %s: %w", pod.Name, state, err))
	}
	return nil
}

// advanceDrain moves pod one step through the drain state machine (no annotation -> requested -> draining ->
// acknowledged -> ready-for-deletion -> deleted). Going to acknowledged sets the pod's pooler (pl, may be nil)
// SHUTDOWN in topology. Reports whether the pod was deleted.
func (r *ShardReconciler) advanceDrain(ctx context.Context, pod *corev1.Pod, pl *topo.Pooler) (deleted bool, err error) {
	switch pod.Annotations[AnnotationDrainState] {
	case "":
		return false, r.setDrainState(ctx, pod, DrainRequested)
	case DrainRequested:
		return false, r.setDrainState(ctx, pod, DrainDraining)
	case DrainDraining:
		if pl != nil && pl.Lifecycle != topo.LifecycleShutdown {
			if err := r.Topo.SetLifecycle(ctx, pod.Namespace, pl.Name, topo.LifecycleShutdown); err != nil {
				return false, fmt.Errorf("shut down pooler %s: %w", pl.Name, err)
			}
		}
		return false, r.setDrainState(ctx, pod, DrainAcknowledged)
	case DrainAcknowledged:
		return false, r.setDrainState(ctx, pod, DrainReadyForDeletion)
	default: // DrainReadyForDeletion (or an unknown state: treat as done)
		if err := r.Client.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
		return true, nil
	}
}
