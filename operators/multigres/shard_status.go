package multigres

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
)

// desiredPod is one pool pod a shard asks for.
type desiredPod struct {
	Name, Pool, Cell string
	Index            int
}

// desiredPoolPods lists the pool pods of shard, sorted by pool, cell, index.
func desiredPoolPods(shard *mgv1.Shard) []desiredPod {
	var out []desiredPod
	for _, pool := range sortedKeys(shard.Spec.Pools) {
		spec := shard.Spec.Pools[pool]
		cells := slices.Clone(spec.Cells)
		slices.Sort(cells)
		for _, cell := range slices.Compact(cells) {
			for i := 0; i < int(spec.ReplicasPerCell); i++ {
				out = append(out, desiredPod{Name: PoolPodName(shard.Name, pool, cell, i), Pool: pool, Cell: cell, Index: i})
			}
		}
	}
	return out
}

// poolCells is the sorted union of the cells of every pool of shard.
func poolCells(shard *mgv1.Shard) []string {
	var cells []string
	for _, p := range shard.Spec.Pools {
		cells = append(cells, p.Cells...)
	}
	slices.Sort(cells)
	return slices.Compact(cells)
}

// orchCells are the cells with a multiorch pod: spec.multiorch.cells, or every pool cell when empty; sorted.
func orchCells(shard *mgv1.Shard) []string {
	if len(shard.Spec.Multiorch.Cells) == 0 {
		return poolCells(shard)
	}
	cells := slices.Clone(shard.Spec.Multiorch.Cells)
	slices.Sort(cells)
	return slices.Compact(cells)
}

// shardCells is the sorted union of pool and multiorch cells (status.cells).
func shardCells(shard *mgv1.Shard) []string {
	cells := append(poolCells(shard), orchCells(shard)...)
	slices.Sort(cells)
	return slices.Compact(cells)
}

// podCondition returns the status of condition t on pod ("" when absent).
func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// podReady reports whether pod's Ready condition is True.
func podReady(pod *corev1.Pod) bool {
	c := podCondition(pod, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// poolPodReady reports whether a pool pod is ready: Ready and PoolerDataReady both True.
func poolPodReady(pod *corev1.Pod) bool {
	c := podCondition(pod, PodConditionPoolerDataReady)
	return podReady(pod) && c != nil && c.Status == corev1.ConditionTrue
}

// statusMessage is the phase message of updateStatus.
func statusMessage(poolsReady, orchReady bool) string {
	return fmt.Sprintf("PoolsReady: %t, OrchReady: %t", poolsReady, orchReady)
}

// computeShardStatus is updateStatus' payload: every status field and every condition except StorageClassValid,
// computed from the shard (generation, current podRoles and conditions) and its pods. poolPods is the pool pod
// list (which, with MG-MULTIORCH-COUNTED-AS-POOL live, also holds the multiorch pods); orchPods the multiorch
// pods; podsLeft the number of pods the shard still owns (for ReadyForDeletion).
func computeShardStatus(shard *mgv1.Shard, poolPods, orchPods []corev1.Pod, podsLeft int, now metav1.Time) mgv1.ShardStatus {
	st := mgv1.ShardStatus{ObservedGeneration: shard.Generation, Cells: shardCells(shard)}

	st.OrchReady = orchPodsReady(shard, orchPods)

	existing := map[string]bool{}
	allReady := true
	for i := range poolPods {
		existing[poolPods[i].Name] = true
		if poolPodReady(&poolPods[i]) {
			st.ReadyReplicas++
		} else {
			allReady = false
		}
	}
	st.PoolsReady = allReady
	for _, d := range desiredPoolPods(shard) {
		if !existing[d.Name] {
			st.PoolsReady = false
		}
	}

	if len(shard.Status.PodRoles) > 0 {
		st.PodRoles = make(map[string]string, len(shard.Status.PodRoles))
		for k, v := range shard.Status.PodRoles {
			st.PodRoles[k] = v
		}
	}

	switch sc := meta.FindStatusCondition(shard.Status.Conditions, mgv1.ConditionStorageClassValid); {
	case sc != nil && sc.Status == metav1.ConditionFalse:
		st.Phase, st.Message = mgv1.PhaseDegraded, "StorageClassValid: False"
	case st.OrchReady && st.PoolsReady:
		st.Phase, st.Message = mgv1.PhaseHealthy, statusMessage(true, true)
	default:
		st.Phase, st.Message = mgv1.PhaseProgressing, statusMessage(st.PoolsReady, st.OrchReady)
	}

	avail := metav1.Condition{Type: mgv1.ConditionAvailable, Status: metav1.ConditionFalse, Reason: string(st.Phase),
		Message: st.Message, ObservedGeneration: shard.Generation}
	if st.Phase == mgv1.PhaseHealthy {
		avail.Status = metav1.ConditionTrue
	}

	posture := postureCondition(shard, poolPods)

	st.Conditions = []metav1.Condition{
		carryCondition(shard.Status.Conditions, avail, now),
		carryCondition(shard.Status.Conditions, posture, now),
	}
	if pendingDeletion(shard) {
		rfd := metav1.Condition{Type: mgv1.ConditionReadyForDeletion, Status: metav1.ConditionFalse,
			Reason: "Draining", Message: fmt.Sprintf("%d pod(s) left", podsLeft), ObservedGeneration: shard.Generation}
		if podsLeft == 0 {
			rfd.Status, rfd.Reason, rfd.Message = metav1.ConditionTrue, "NoPodsLeft", "no pod left"
		}
		st.Conditions = append(st.Conditions, carryCondition(shard.Status.Conditions, rfd, now))
	}
	return st
}

// orchPodsReady reports whether every cell with a multiorch pod has its pod among orchPods, Ready.
func orchPodsReady(shard *mgv1.Shard, orchPods []corev1.Pod) bool {
	orchByName := map[string]*corev1.Pod{}
	for i := range orchPods {
		orchByName[orchPods[i].Name] = &orchPods[i]
	}
	ready := true
	for _, cell := range orchCells(shard) {
		if p := orchByName[MultiorchPodName(shard.Name, cell)]; p == nil || !podReady(p) {
			ready = false
		}
	}
	return ready
}

// postureCondition is the PostureConsistent condition: True when every pool pod has a role in the shard's
// current podRoles and PoolerDataReady True, else False with the count of those that do not.
func postureCondition(shard *mgv1.Shard, poolPods []corev1.Pod) metav1.Condition {
	inconsistent := 0
	for i := range poolPods {
		c := podCondition(&poolPods[i], PodConditionPoolerDataReady)
		if shard.Status.PodRoles[poolPods[i].Name] == "" || c == nil || c.Status != corev1.ConditionTrue {
			inconsistent++
		}
	}
	posture := metav1.Condition{Type: mgv1.ConditionPostureConsistent, Status: metav1.ConditionTrue,
		Reason: "PostureConsistent", Message: "every pool pod has a role and PoolerDataReady",
		ObservedGeneration: shard.Generation}
	if inconsistent > 0 {
		posture.Status, posture.Reason = metav1.ConditionFalse, "PostureInconsistent"
		posture.Message = fmt.Sprintf("%d of %d pool pod(s) without a role or PoolerDataReady", inconsistent, len(poolPods))
	}
	return posture
}
