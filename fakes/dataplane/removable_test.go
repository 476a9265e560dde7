package dataplane

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A terminating pod left with grace period 0 is the kubelet's to delete: the API server sets that grace period
// in the first phase of a delete and removes the pod in the second, so a delete cut short between the two
// (a restart point stopping the kubelet mid-request) leaves such a pod behind, and the real kubelet's status
// manager deletes every terminated pod still there, whatever its grace period.
func TestRemovableWhateverTheGracePeriod(t *testing.T) {
	now := metav1.Now()
	pod := func(grace *int64, nodeName string, finalizers ...string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", DeletionTimestamp: &now, DeletionGracePeriodSeconds: grace, Finalizers: finalizers},
			Spec:       corev1.PodSpec{NodeName: nodeName},
		}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"grace 30", pod(ptr.To[int64](30), "node"), true},
		{"grace 0, left by a delete cut short", pod(ptr.To[int64](0), "node"), true},
		{"no grace period", pod(nil, "node"), true},
		{"a finalizer left", pod(ptr.To[int64](0), "node", "example.com/keep"), false},
		{"never bound", pod(ptr.To[int64](30), ""), false},
		{"not terminating", &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node"}}, false},
	} {
		if got := removable(tc.pod); got != tc.want {
			t.Errorf("%s: removable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
