package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ---------------------------------------------------------------------------------------------------------
// CNPool

// CNPoolSpec is a pool of pre-started CN pods that CNClaims bind to.
type CNPoolSpec struct {
	// PodLabels are put on every pod of the pool; a CNClaim whose selector matches them (and that names no
	// pool) is nominated to this pool.
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// Deps names what the pool's CN pods need before they can start.
	// +required
	Deps CNPoolDeps `json:"deps"`

	// Template is the CN pod template (kept minimal: the image).
	// +optional
	Template CNPoolTemplate `json:"template,omitempty"`

	// Strategy holds the scale and update strategies.
	// +optional
	Strategy CNPoolStrategy `json:"strategy,omitempty"`
}

// CNPoolDeps names the dependencies of a pool.
type CNPoolDeps struct {
	// LogSet is the name of the LogSet (same namespace) whose HAKeeper the pool's CN stores register with.
	// The pool waits until that LogSet is Ready.
	// +required
	// +kubebuilder:validation:MinLength=1
	LogSet string `json:"logSet"`
}

// CNPoolTemplate is the (minimal) template of a pool's CN pods.
type CNPoolTemplate struct {
	// Image is the CN container image. Empty means "matrixorigin/matrixone:latest".
	// +optional
	Image string `json:"image,omitempty"`
}

// CNPoolStrategy holds a pool's scale and update strategies.
type CNPoolStrategy struct {
	// ScaleStrategy bounds the number of pods.
	// +optional
	ScaleStrategy CNPoolScaleStrategy `json:"scaleStrategy,omitempty"`
	// UpdateStrategy governs reclaimed pods.
	// +optional
	UpdateStrategy CNPoolUpdateStrategy `json:"updateStrategy,omitempty"`
}

// CNPoolScaleStrategy bounds a pool: it keeps in-use + pending + maxIdle pods, at most maxPods.
type CNPoolScaleStrategy struct {
	// MaxIdle is the number of idle pods kept ready on top of the pods in use and the pending claims.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxIdle int32 `json:"maxIdle,omitempty"`
	// MaxPods caps the pool's pods; unset means no cap.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxPods *int32 `json:"maxPods,omitempty"`
}

// CNPoolUpdateStrategy governs reclaimed pods.
type CNPoolUpdateStrategy struct {
	// ReclaimTimeout bounds the drain of a reclaimed pod: past it the pod is Terminating. Unset means the
	// operator's drain timeout (5 min).
	// +optional
	ReclaimTimeout *metav1.Duration `json:"reclaimTimeout,omitempty"`
}

// CNPoolStatus counts a pool's pods, as of the last pass.
type CNPoolStatus struct {
	// TotalPods counts the pool's pods that are not Terminating.
	// +optional
	TotalPods int32 `json:"totalPods,omitempty"`
	// IdlePods counts pods in phase Unknown or Idle.
	// +optional
	IdlePods int32 `json:"idlePods,omitempty"`
	// InUsePods counts pods in phase Bound or Draining.
	// +optional
	InUsePods int32 `json:"inUsePods,omitempty"`
	// PendingClaims counts the claims nominated to the pool that are still Pending.
	// +optional
	PendingClaims int32 `json:"pendingClaims,omitempty"`
}

// CNPool is a pool of CN pods (labels pool.matrixorigin.io/pool-name=<name>, phase label
// pool.matrixorigin.io/phase) that CNClaims bind to.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.totalPods`
// +kubebuilder:printcolumn:name="Idle",type=integer,JSONPath=`.status.idlePods`
// +kubebuilder:printcolumn:name="InUse",type=integer,JSONPath=`.status.inUsePods`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CNPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec CNPoolSpec `json:"spec"`
	// Status is the observed state (status subresource).
	// +optional
	Status CNPoolStatus `json:"status,omitempty"`
}

// CNPoolList is a list of CNPools.
//
// +kubebuilder:object:root=true
type CNPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the listed objects.
	Items []CNPool `json:"items"`
}

// ---------------------------------------------------------------------------------------------------------
// CNClaim

// CNClaimPhase is the phase of a CNClaim.
// +kubebuilder:validation:Enum=Pending;Bound;Lost;Outdated
type CNClaimPhase string

const (
	// CNClaimPhasePending: no pod bound yet.
	CNClaimPhasePending CNClaimPhase = "Pending"
	// CNClaimPhaseBound: spec.podName names the pod the claim holds, and its store is Working.
	CNClaimPhaseBound CNClaimPhase = "Bound"
	// CNClaimPhaseLost: the bound pod is gone (or Succeeded/Unknown).
	CNClaimPhaseLost CNClaimPhase = "Lost"
	// CNClaimPhaseOutdated: the bound pod is marked outdated (built from an old template).
	CNClaimPhaseOutdated CNClaimPhase = "Outdated"
)

// CNLabel is one CN store label: a key and its values.
type CNLabel struct {
	// Key is the label key.
	// +required
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
	// Values are the label's values.
	// +optional
	// +listType=atomic
	Values []string `json:"values,omitempty"`
}

// CNClaimSourcePod is the pod a claim migrates away from.
type CNClaimSourcePod struct {
	// PodName is the source pod's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	PodName string `json:"podName"`
	// NodeName is the source pod's node.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// CNClaimSpec is what a claim asks for and, once bound, which pod it holds.
type CNClaimSpec struct {
	// PodName is the pod the claim is bound to; empty while unbound. Written by the operator on bind, and by
	// the migrator agent when it moves the claim.
	// +optional
	PodName string `json:"podName,omitempty"`
	// NodeName is the bound pod's node.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// SourcePod, when set, is the pod the claim migrates away from (set by the migrator agent).
	// +optional
	SourcePod *CNClaimSourcePod `json:"sourcePod,omitempty"`
	// Selector selects the pool pods the claim may bind.
	// +required
	Selector *metav1.LabelSelector `json:"selector"`
	// CNLabels are put on the bound CN store in HAKeeper.
	// +optional
	// +listType=map
	// +listMapKey=key
	CNLabels []CNLabel `json:"cnLabels,omitempty"`
	// OwnerName is the tenant the claim serves (label matrixorigin.io/owner on the bound pod); a pod last
	// owned by the same owner is preferred.
	// +optional
	OwnerName string `json:"ownerName,omitempty"`
	// AdditionalPodLabels are put on the bound pod (and removed when it is reclaimed).
	// +optional
	AdditionalPodLabels map[string]string `json:"additionalPodLabels,omitempty"`
	// PoolName is the pool the claim binds from: set by the operator when it nominates a pool, or on bind.
	// +optional
	PoolName string `json:"poolName,omitempty"`
}

// CNWorkload counts a CN store's work.
type CNWorkload struct {
	// Connections are open client sessions.
	// +optional
	Connections int32 `json:"connections,omitempty"`
	// Pipelines are running pipelines.
	// +optional
	Pipelines int32 `json:"pipelines,omitempty"`
	// Replicas are replicas served.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
}

// CNClaimMigrateStatus is the progress of a migration: what is left on the source.
type CNClaimMigrateStatus struct {
	// Source is the source pod's remaining work.
	// +optional
	Source CNWorkload `json:"source,omitempty"`
}

// CNClaimStoreStatus is the bound CN store as the operator last saw it (from its store cache).
type CNClaimStoreStatus struct {
	// ServiceID is the store's UUID.
	// +optional
	ServiceID string `json:"serviceID,omitempty"`
	// WorkState is the store's work state (Unknown, Working, Draining, Drained).
	// +optional
	WorkState string `json:"workState,omitempty"`
	// Labels are the store's labels, sorted by key.
	// +optional
	// +listType=atomic
	Labels []CNLabel `json:"labels,omitempty"`
	// PodName is the pod the store runs in.
	// +optional
	PodName string `json:"podName,omitempty"`
	// BoundTime is when the claim bound this store's pod; a migration waits a while after it.
	// +optional
	BoundTime *metav1.Time `json:"boundTime,omitempty"`
}

// CNClaimStatus is the observed state of a claim.
type CNClaimStatus struct {
	// Phase is Pending, Bound, Lost or Outdated.
	// +optional
	Phase CNClaimPhase `json:"phase,omitempty"`
	// BoundTime is when the claim became Bound.
	// +optional
	BoundTime *metav1.Time `json:"boundTime,omitempty"`
	// Store is the bound CN store.
	// +optional
	Store CNClaimStoreStatus `json:"store,omitempty"`
	// Migrate is the progress of a running migration; nil when none.
	// +optional
	Migrate *CNClaimMigrateStatus `json:"migrate,omitempty"`
}

// CNClaim binds one CN pod of a pool (label pool.matrixorigin.io/claimed-by=<name> on the pod).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.podName`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CNClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec CNClaimSpec `json:"spec"`
	// Status is the observed state (status subresource).
	// +optional
	Status CNClaimStatus `json:"status,omitempty"`
}

// CNClaimList is a list of CNClaims.
//
// +kubebuilder:object:root=true
type CNClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the listed objects.
	Items []CNClaim `json:"items"`
}

// ---------------------------------------------------------------------------------------------------------
// CNClaimSet

// CNClaimTemplateMeta is the metadata given to a CNClaimSet's claims.
type CNClaimTemplateMeta struct {
	// Labels are put on every claim (the set adds matrixorigin.io/claimset and
	// claim.matrixorigin.io/instance-id).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are put on every claim.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// CNClaimTemplate is the template of a CNClaimSet's claims.
type CNClaimTemplate struct {
	// Metadata of each claim.
	// +optional
	Metadata CNClaimTemplateMeta `json:"metadata,omitempty"`
	// Spec of each claim; ownerName defaults to the set's name.
	// +required
	Spec CNClaimSpec `json:"spec"`
}

// CNClaimSetSpec asks for a number of claims made from a template.
type CNClaimSetSpec struct {
	// Replicas is the number of claims.
	// +required
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`
	// Template is the claims' template.
	// +required
	Template CNClaimTemplate `json:"template"`
	// Selector selects the set's claims; unset means the label matrixorigin.io/claimset=<set name>.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// CNClaimSetClaim is one claim of a set, as the set last saw it.
type CNClaimSetClaim struct {
	// ClaimName is the claim's name.
	ClaimName string `json:"claimName"`
	// PodName is the claim's spec.podName.
	// +optional
	PodName string `json:"podName,omitempty"`
	// Phase is the claim's phase.
	// +optional
	Phase CNClaimPhase `json:"phase,omitempty"`
}

// CNClaimSetStatus is the observed state of a set.
type CNClaimSetStatus struct {
	// Replicas counts the set's claims that are not lost.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas counts the set's Bound claims.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Claims lists the set's claims, sorted by name.
	// +optional
	// +listType=atomic
	Claims []CNClaimSetClaim `json:"claims,omitempty"`
	// LabelSelector is the set's claim selector in string form (for the scale subresource).
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`
}

// CNClaimSet keeps spec.replicas CNClaims named <set>-<instance id>.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.labelSelector
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CNClaimSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec CNClaimSetSpec `json:"spec"`
	// Status is the observed state (status subresource).
	// +optional
	Status CNClaimSetStatus `json:"status,omitempty"`
}

// CNClaimSetList is a list of CNClaimSets.
//
// +kubebuilder:object:root=true
type CNClaimSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the listed objects.
	Items []CNClaimSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CNPool{}, &CNPoolList{}, &CNClaim{}, &CNClaimList{}, &CNClaimSet{}, &CNClaimSetList{})
}
