// Package v1alpha1 stands in for Kubeflow Trainer's API package (github.com/kubeflow/trainer/v2
// v2.2.0, pkg/apis/trainer/v1alpha1) in examples/kueue. Kueue v0.17.0's jobframework imports that package
// only for the TrainJob GroupVersionKind (pkg/controller/jobframework/validation.go, line 59), and no
// version of it the Go module proxy serves (v2.0.0 to v2.3.0) compiles against k8s.io/api v0.37.2: its
// generated OpenAPI file names corev1.PodStatusResult and corev1.WorkloadReference, which v0.37 removed.
// examples/kueue/go.mod replaces the module with this directory; Kueue's TrainJob integration is not
// enabled there, so nothing else of Trainer is needed.
package v1alpha1

import "k8s.io/apimachinery/pkg/runtime/schema"

// GroupVersion is Trainer's API group and version, trainer.kubeflow.org/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "trainer.kubeflow.org", Version: "v1alpha1"}

// SchemeGroupVersion is GroupVersion, under the name client-go libraries use.
var SchemeGroupVersion = GroupVersion

// TrainJobKind is the kind of Trainer's TrainJob.
const TrainJobKind = "TrainJob"
