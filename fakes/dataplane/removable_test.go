package dataplane

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A terminating pod left with grace period 0 is the kubelet's to delete once it has been there longer than the
// API server's own removal takes: the API server sets that grace period in the first phase of a delete and
// removes the pod in the second, so a delete cut short between the two (a restart point stopping the kubelet
// mid-request) leaves such a pod behind, and the real kubelet's status manager deletes every terminated pod
// still there, whatever its grace period. A pod with a longer grace period is removed at once, as before.
func TestRemovableAndLeftAtGraceZero(t *testing.T) {
	now := time.Now()
	deleted := metav1.NewTime(now.Add(-time.Second).Truncate(time.Second))
	long := metav1.NewTime(now.Add(-time.Minute))
	pod := func(at metav1.Time, grace *int64, nodeName string, finalizers ...string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", DeletionTimestamp: &at, DeletionGracePeriodSeconds: grace, Finalizers: finalizers},
			Spec:       corev1.PodSpec{NodeName: nodeName},
		}
	}
	for _, tc := range []struct {
		name            string
		pod             *corev1.Pod
		removable, left bool
		waits           bool
	}{
		{"grace 30", pod(deleted, ptr.To[int64](30), "node"), true, false, false},
		{"no grace period", pod(deleted, nil, "node"), true, false, false},
		{"grace 0, just set by the API server", pod(deleted, ptr.To[int64](0), "node"), false, true, true},
		{"grace 0, left by a delete cut short", pod(long, ptr.To[int64](0), "node"), false, true, false},
		{"grace 0 with a finalizer left", pod(long, ptr.To[int64](0), "node", "example.com/keep"), false, false, false},
		{"never bound", pod(long, ptr.To[int64](0), ""), false, false, false},
		{"not terminating", &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node"}}, false, false, false},
	} {
		if got := removable(tc.pod); got != tc.removable {
			t.Errorf("%s: removable = %v, want %v", tc.name, got, tc.removable)
		}
		left, wait := leftAtGraceZero(tc.pod, now)
		if left != tc.left || (wait > 0) != tc.waits || wait > stuckAfter {
			t.Errorf("%s: leftAtGraceZero = %v, %s; want %v, waiting %v (at most %s)", tc.name, left, wait, tc.left, tc.waits, stuckAfter)
		}
	}
}
