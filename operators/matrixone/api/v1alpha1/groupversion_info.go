// Package v1alpha1 holds the API of the MatrixOne reference operator (group core.matrixorigin.io, version
// v1alpha1): LogSet, DNSet and ProxySet (ordinal pod sets with a rendered ConfigMap), and CNPool, CNClaim and
// CNClaimSet (pooled CN pods bound to claims). The shapes follow the real MatrixOne operator closely enough
// that a reader who knows it recognises the fields (docs/architecture.md §7).
//
// +kubebuilder:object:generate=true
// +groupName=core.matrixorigin.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package: core.matrixorigin.io/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "core.matrixorigin.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds every kind of this package (and its list) to a scheme. It returns an error only when
	// the scheme already holds a conflicting registration.
	AddToScheme = SchemeBuilder.AddToScheme
)
