package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is the coarse state of a Shard, TableGroup or MultigresCluster.
// +kubebuilder:validation:Enum=Progressing;Healthy;Degraded
type Phase string

const (
	// PhaseProgressing means the object has not converged yet (pods missing or not ready).
	PhaseProgressing Phase = "Progressing"
	// PhaseHealthy means every pool pod and every multiorch pod is Ready.
	PhaseHealthy Phase = "Healthy"
	// PhaseDegraded means the object cannot converge without outside help (e.g. a missing StorageClass).
	PhaseDegraded Phase = "Degraded"
)

// Condition types written on Shards and TableGroups.
const (
	// ConditionAvailable is True on a Shard whose phase is Healthy. Written by updateStatus.
	ConditionAvailable = "Available"
	// ConditionStorageClassValid says whether every StorageClass a Shard names exists. Written by the
	// StorageClass guard under its own field owner, never by updateStatus.
	ConditionStorageClassValid = "StorageClassValid"
	// ConditionReadyForDeletion is True on a Shard (or TableGroup) marked pending-deletion once it holds no
	// pods (no Shards); its parent deletes it only then.
	ConditionReadyForDeletion = "ReadyForDeletion"
	// ConditionPostureConsistent is True on a Shard when every pool pod has a role in status.podRoles and its
	// PoolerDataReady pod condition is True. Written by updateStatus.
	ConditionPostureConsistent = "PostureConsistent"
)

// MultiorchSpec places the multiorch (the orchestrator that elects a primary) of a shard.
type MultiorchSpec struct {
	// Cells holds one multiorch pod each. Empty means every cell that holds a pool of the shard.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=40
	Cells []string `json:"cells,omitempty"`
}

// PoolSpec is one pool of Postgres pods (each with a pooler) of a shard.
type PoolSpec struct {
	// Cells holds replicasPerCell pods each.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=40
	Cells []string `json:"cells"`

	// ReplicasPerCell is the number of pool pods per cell; 0 drains the pool.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	ReplicasPerCell int32 `json:"replicasPerCell"`

	// StorageClass is the storage.k8s.io/v1 StorageClass of the pool's data volumes. Empty means the
	// cluster default (not checked by the guard).
	// +optional
	StorageClass string `json:"storageClass,omitempty"`
}

// ShardTemplate is a shard as written in a MultigresCluster and resolved into a TableGroup.
type ShardTemplate struct {
	// Name is the shard name (e.g. "0-inf"); it goes into object names and the multigres.com/shard label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Multiorch places the shard's multiorch pods.
	// +optional
	Multiorch MultiorchSpec `json:"multiorch,omitempty"`

	// BackupStorageClass is the StorageClass for backups. Empty means no backup volume (not checked).
	// +optional
	BackupStorageClass string `json:"backupStorageClass,omitempty"`

	// Pools maps a pool name (a DNS label) to the pool.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(k) <= 40)",message="pool names must be DNS labels of at most 40 characters"
	Pools map[string]PoolSpec `json:"pools,omitempty"`
}

// TableGroupTemplate is a table group as written in a MultigresCluster.
type TableGroupTemplate struct {
	// Name is the table group name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Shards of the table group.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Shards []ShardTemplate `json:"shards,omitempty"`
}

// DatabaseSpec is one logical database of a MultigresCluster.
type DatabaseSpec struct {
	// Name is the database name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// TableGroups of the database; each becomes one TableGroup object.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	TableGroups []TableGroupTemplate `json:"tableGroups,omitempty"`
}

// MultigresClusterSpec is the desired cluster.
type MultigresClusterSpec struct {
	// Cells are registered in topology (failure domains such as zones).
	// +required
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=40
	Cells []string `json:"cells"`

	// Databases of the cluster; each is registered in topology.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Databases []DatabaseSpec `json:"databases,omitempty"`
}

// MultigresClusterStatus is the observed cluster.
type MultigresClusterStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is Healthy when every desired TableGroup exists and is Healthy and no removed one is left, else
	// Progressing.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// ReadyTableGroups counts desired TableGroups that are Healthy at their current generation.
	// +optional
	ReadyTableGroups int32 `json:"readyTableGroups"`
	// TotalTableGroups counts desired TableGroups (databases x table groups).
	// +optional
	TotalTableGroups int32 `json:"totalTableGroups"`
}

// MultigresCluster is a Multigres cluster: cells, databases, table groups and shards. It carries the finalizer
// multigres.com/cluster-cleanup and owns one TableGroup per database x table group.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mgc
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyTableGroups`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.totalTableGroups`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MultigresCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec MultigresClusterSpec `json:"spec"`
	// Status is the observed state (status subresource).
	// +optional
	Status MultigresClusterStatus `json:"status,omitempty"`
}

// MultigresClusterList is a list of MultigresClusters.
//
// +kubebuilder:object:root=true
type MultigresClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the listed objects.
	Items []MultigresCluster `json:"items"`
}

// TableGroupSpec is one table group of one database, with its shards resolved from the cluster.
type TableGroupSpec struct {
	// DatabaseName is the database this table group belongs to.
	// +required
	// +kubebuilder:validation:MinLength=1
	DatabaseName string `json:"databaseName"`
	// TableGroupName is the table group name inside the database.
	// +required
	// +kubebuilder:validation:MinLength=1
	TableGroupName string `json:"tableGroupName"`
	// Shards are applied as Shard objects.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Shards []ShardTemplate `json:"shards,omitempty"`
}

// TableGroupStatus is the observed table group.
type TableGroupStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is Healthy when every desired Shard is Healthy at its current generation and no removed one is
	// left, else Progressing.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// ReadyShards counts desired Shards whose status caught up with their generation and is Healthy.
	// +optional
	ReadyShards int32 `json:"readyShards"`
	// TotalShards counts desired Shards.
	// +optional
	TotalShards int32 `json:"totalShards"`
	// Conditions: ReadyForDeletion (only while pending deletion).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TableGroup is one database x table group of a MultigresCluster; it owns its Shards.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tg
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyShards`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.totalShards`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TableGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec TableGroupSpec `json:"spec"`
	// Status is the observed state (status subresource).
	// +optional
	Status TableGroupStatus `json:"status,omitempty"`
}

// TableGroupList is a list of TableGroups.
//
// +kubebuilder:object:root=true
type TableGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the listed objects.
	Items []TableGroup `json:"items"`
}

// ShardSpec is one shard: its pools, multiorch placement and backup class.
type ShardSpec struct {
	// DatabaseName is the database of the shard (multigres.com/database label, topology key).
	// +required
	// +kubebuilder:validation:MinLength=1
	DatabaseName string `json:"databaseName"`
	// TableGroupName is the table group of the shard (multigres.com/tablegroup label, topology key).
	// +required
	// +kubebuilder:validation:MinLength=1
	TableGroupName string `json:"tableGroupName"`
	// ShardName is the shard name (multigres.com/shard label, topology key).
	// +required
	// +kubebuilder:validation:MinLength=1
	ShardName string `json:"shardName"`

	// Multiorch places the multiorch pods.
	// +optional
	Multiorch MultiorchSpec `json:"multiorch,omitempty"`

	// BackupStorageClass is the StorageClass for backups; empty means none.
	// +optional
	BackupStorageClass string `json:"backupStorageClass,omitempty"`

	// Pools maps a pool name to the pool.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(k) <= 40)",message="pool names must be DNS labels of at most 40 characters"
	Pools map[string]PoolSpec `json:"pools,omitempty"`
}

// ShardStatus is the observed shard. Several field managers write it (server-side apply):
// multigres-resource-handler (updateStatus: every field and every condition except StorageClassValid),
// multigres-resource-handler-guard (StorageClassValid only), and the data-plane podRoles patch.
type ShardStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is Healthy when orchReady and poolsReady, Degraded when StorageClassValid is False, else Progressing.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Message explains the phase, e.g. "PoolsReady: false, OrchReady: true".
	// +optional
	Message string `json:"message,omitempty"`

	// Cells are the cells the shard runs in (pools and multiorch), sorted.
	// +optional
	// +listType=atomic
	Cells []string `json:"cells,omitempty"`

	// OrchReady is true when the multiorch pod of every cell is Ready. Deliberately not omitempty: a typed
	// payload always serialises it (the root of MG-STATUS-SSA-ZERO-FIELDS).
	OrchReady bool `json:"orchReady"`

	// PoolsReady is true when the shard's pool pods exist and are all Ready (and PoolerDataReady).
	// Deliberately not omitempty, like OrchReady.
	// +optional
	PoolsReady bool `json:"poolsReady"`

	// ReadyReplicas counts Ready pool pods.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// PodRoles maps a pool pod name to its topology role: PRIMARY, REPLICA or QUARANTINED.
	// +optional
	// +mapType=granular
	PodRoles map[string]string `json:"podRoles,omitempty"`

	// Conditions: Available, StorageClassValid, ReadyForDeletion, PostureConsistent. A list map keyed by type,
	// so that two appliers can each own an entry.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Shard is one shard of a table group. It carries the finalizer multigres.com/shard-pvc-orphan and is the
// controller owner of its pods: one multiorch pod per cell and pool pods <shard>-pool-<pool>-<cell>-<i>.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Orch",type=boolean,JSONPath=`.status.orchReady`
// +kubebuilder:printcolumn:name="Pools",type=boolean,JSONPath=`.status.poolsReady`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Shard struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec ShardSpec `json:"spec"`
	// Status is the observed state (status subresource).
	// +optional
	Status ShardStatus `json:"status,omitempty"`
}

// ShardList is a list of Shards.
//
// +kubebuilder:object:root=true
type ShardList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the listed objects.
	Items []Shard `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MultigresCluster{}, &MultigresClusterList{}, &TableGroup{}, &TableGroupList{},
		&Shard{}, &ShardList{})
}
