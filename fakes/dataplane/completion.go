package dataplane

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Pod annotations that make the kubelet run a pod to completion.
const (
	// AnnotationRunFor makes any pod run to completion: its value, a Go duration ("250ms", "2s"), is how long
	// its containers run from their start before they exit. On a pod owned by a batch Job (which runs to
	// completion anyway) it overrides Options.RunFor. An unparsable or negative value counts as absent.
	AnnotationRunFor = "ensemble.test/run-for"
	// AnnotationExitCode is the exit code ("3") of every container of a pod that runs to completion (a Job's
	// pod, or one annotated AnnotationRunFor); default 0. Non-zero: the pod goes Failed under restartPolicy
	// Never, and restarts under OnFailure and Always. Ignored on other pods; an unparsable value counts as
	// absent.
	AnnotationExitCode = "ensemble.test/exit-code"
)

// completion tells whether pod runs to completion, and if so for how long its containers run from a start
// (def unless annotated) and with which code they exit.
func completion(pod *corev1.Pod, def time.Duration) (runFor time.Duration, exitCode int32, ok bool) {
	v, annotated := pod.Annotations[AnnotationRunFor]
	var d time.Duration
	if annotated {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d < 0 {
			annotated = false
		}
	}
	if !annotated && !ownedByJob(pod) {
		return 0, 0, false
	}
	runFor = def
	if annotated {
		runFor = d
	}
	if s, has := pod.Annotations[AnnotationExitCode]; has {
		if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32); err == nil {
			exitCode = int32(n)
		}
	}
	return runFor, exitCode, true
}

// ownedByJob reports whether pod has an owner reference to a batch Job.
func ownedByJob(pod *corev1.Pod) bool {
	for _, r := range pod.OwnerReferences {
		if r.Kind == "Job" && strings.HasPrefix(r.APIVersion, "batch/") {
			return true
		}
	}
	return false
}

// restartsAfterExit reports whether containers that exited with code are restarted under policy (the
// API server defaults an empty policy to Always).
func restartsAfterExit(policy corev1.RestartPolicy, code int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

// exitReason is the container state reason the kubelet reports for exit code code.
func exitReason(code int32) string {
	if code == 0 {
		return "Completed"
	}
	return "Error"
}
