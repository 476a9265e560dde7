// Package v1alpha1 holds the API of the Multigres reference operator (group multigres.com, version v1alpha1):
// MultigresCluster fans out to TableGroups, which fan out to Shards. The shapes follow the real Multigres
// operator closely enough that a reader who knows it recognises the fields (docs/architecture.md §6).
//
// +kubebuilder:object:generate=true
// +groupName=multigres.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package: multigres.com/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "multigres.com", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds MultigresCluster, TableGroup and Shard (and their lists) to a scheme.
	// It returns an error only when the scheme already holds a conflicting registration.
	AddToScheme = SchemeBuilder.AddToScheme
)
