package matrixone

import corev1 "k8s.io/api/core/v1"

// Controller names, as passed to the builder's Named and used by the harness to label writes and passes.
const (
	LogSetControllerName     = "matrixone-logset"
	DNSetControllerName      = "matrixone-dnset"
	ProxySetControllerName   = "matrixone-proxyset"
	CNPoolControllerName     = "matrixone-cnpool"
	CNClaimControllerName    = "matrixone-cnclaim"
	CNClaimSetControllerName = "matrixone-cnclaimset"
	CNStoreControllerName    = "matrixone-cnstore"
)

// FieldOwner is the field manager of every write the operator makes.
const FieldOwner = "matrixone-operator"

// FinalizerPrefix + controller name is each controller's finalizer ("matrixorigin.io/<controller-name>"),
// added before any work.
const FinalizerPrefix = "matrixorigin.io/"

// Pod labels (docs/architecture.md §7).
const (
	// LabelPhase is a CN pool pod's phase: PhaseUnknown, PhaseIdle, PhaseBound, PhaseDraining, PhaseTerminating.
	LabelPhase = "pool.matrixorigin.io/phase"
	// LabelClaimedBy names the CNClaim a Bound pod serves.
	LabelClaimedBy = "pool.matrixorigin.io/claimed-by"
	// LabelPoolName names the CNPool a pod belongs to.
	LabelPoolName = "pool.matrixorigin.io/pool-name"
	// LabelOwner is the claim's ownerName on a Bound pod; LabelLastOwner keeps it after reclaim.
	LabelOwner     = "matrixorigin.io/owner"
	LabelLastOwner = "matrixorigin.io/last-owner"
	// LabelClaimSet names the CNClaimSet of the claim a pod serves.
	LabelClaimSet = "matrixorigin.io/claimset"
	// LabelOutdated marks a pod built from an old template: never selected for a new claim.
	LabelOutdated = "matrixorigin.io/outdated"
	// LabelClaimInstanceID is a claim's 5-character instance ID, set by its CNClaimSet.
	LabelClaimInstanceID = "claim.matrixorigin.io/instance-id"
	// LabelComponent is the component of a pod: ComponentLogSet, ComponentDNSet, ComponentProxySet or
	// ComponentCN (ensemble's own label, so the fakes can find the pods); LabelInstance its owner's name.
	LabelComponent = "matrixorigin.io/component"
	LabelInstance  = "matrixorigin.io/instance"
)

// Components (values of LabelComponent).
const (
	ComponentLogSet   = "LogSet"
	ComponentDNSet    = "DNSet"
	ComponentProxySet = "ProxySet"
	ComponentCN       = "CNSet"
)

// CN pool pod phases (values of LabelPhase).
const (
	PhaseUnknown     = "Unknown"
	PhaseIdle        = "Idle"
	PhaseBound       = "Bound"
	PhaseDraining    = "Draining"
	PhaseTerminating = "Terminating"
)

// Pod annotations.
const (
	AnnotationManagementPolicy = "pool.matrixorigin.io/management-policy" // "Pooling" on pool pods
	AnnotationReclaimedAt      = "matrixorigin.io/reclaimed-at"           // RFC 3339 time of the last reclaim
	AnnotationDeleteOnReclaim  = "matrixorigin.io/delete-on-reclaim"      // "true": Terminating after the drain
	AnnotationScore            = "matrixorigin.io/score"                  // sessions, pipelines, replicas, started
	AnnotationDeletionCost     = "controller.kubernetes.io/pod-deletion-cost"
	// AnnotationConfigSuffix is the digest of the config a pod runs; the container reads it through the
	// downward API, so changing it is an in-place restart.
	AnnotationConfigSuffix = "matrixorigin.io/config-suffix"
)

// ManagementPolicyPooling is the AnnotationManagementPolicy value of pool pods.
const ManagementPolicyPooling = "Pooling"

// FinalizerCNDraining is held by CN pods until their store is drained and removed.
const FinalizerCNDraining = "matrixorigin.io/cn-draining"

// PodConditionCNStore is the readiness condition of a CN pod: True once its store is in HAKeeper.
const PodConditionCNStore corev1.PodConditionType = "matrixorigin.io/cn-store"
