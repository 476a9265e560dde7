package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionTypeReady is the condition type a LogSet, DNSet or ProxySet reports readiness with: True when every
// desired pod exists, is Ready and runs the config digest in status.configSuffix.
const ConditionTypeReady = "Ready"

// PodSetSpec is what LogSet, DNSet and ProxySet have in common: how many ordinal pods to run and the
// component's configuration.
type PodSetSpec struct {
	// Replicas is the number of ordinal pods <name>-0 .. <name>-(replicas-1).
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	Replicas int32 `json:"replicas"`

	// Config is the component's configuration, key -> value, rendered to TOML (keys sorted, values as
	// strings) over the operator's defaults. Keys are bare or dotted TOML keys.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z0-9_-]+([.][A-Za-z0-9_-]+)*$') && size(k) <= 128)",message="config keys must be bare or dotted TOML keys of at most 128 characters"
	Config map[string]string `json:"config,omitempty"`
}

// PodSetStatus is what LogSet, DNSet and ProxySet report in common. The operator writes it whole, with an
// Update of the status subresource, after each observation.
type PodSetStatus struct {
	// Conditions holds the Ready condition (ConditionTypeReady).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation of the spec this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ConfigSuffix is the digest (7 hex characters) of the config the operator renders now: the suffix of
	// the ConfigMap key config.toml-<digest> and the value every pod's matrixorigin.io/config-suffix
	// annotation converges to.
	// +optional
	ConfigSuffix string `json:"configSuffix,omitempty"`

	// ReadyReplicas counts the pods that are Ready and run ConfigSuffix.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
}

// IsReady reports whether the Ready condition is True.
func (s *PodSetStatus) IsReady() bool {
	for _, c := range s.Conditions {
		if c.Type == ConditionTypeReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// PodSetDeps names what a DNSet or ProxySet depends on.
type PodSetDeps struct {
	// LogSet is the name of the LogSet, in the same namespace, whose HAKeeper the component joins. The
	// component waits until that LogSet is Ready.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	LogSet string `json:"logSet"`
}

// LogSetSpec is the desired state of a LogSet: the log service (and its HAKeeper).
type LogSetSpec struct {
	PodSetSpec `json:",inline"`
}

// LogSetStatus is the observed state of a LogSet.
type LogSetStatus struct {
	PodSetStatus `json:",inline"`

	// Discovery is the address of the LogSet's HAKeeper: the key "<namespace>/<name>" under which the
	// HAKeeper instance (fakes/hakeeperfake) serves. DNSet and ProxySet configs point at it.
	// +optional
	Discovery string `json:"discovery,omitempty"`
}

// LogSet is a set of log service pods and the ConfigMap they run from. DNSets, ProxySets and CN pools
// depend on a Ready LogSet.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ls
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Suffix",type=string,JSONPath=`.status.configSuffix`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LogSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec LogSetSpec `json:"spec"`
	// +optional
	Status LogSetStatus `json:"status,omitempty"`
}

// LogSetList is a list of LogSets.
//
// +kubebuilder:object:root=true
type LogSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LogSet `json:"items"`
}

// DNSetSpec is the desired state of a DNSet: the transaction nodes.
type DNSetSpec struct {
	PodSetSpec `json:",inline"`

	// Deps names the LogSet the DN pods join.
	// +required
	Deps PodSetDeps `json:"deps"`
}

// DNSetStatus is the observed state of a DNSet.
type DNSetStatus struct {
	PodSetStatus `json:",inline"`
}

// DNSet is a set of DN (transaction node) pods and the ConfigMap they run from.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dn
// +kubebuilder:printcolumn:name="LogSet",type=string,JSONPath=`.spec.deps.logSet`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Suffix",type=string,JSONPath=`.status.configSuffix`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DNSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DNSetSpec `json:"spec"`
	// +optional
	Status DNSetStatus `json:"status,omitempty"`
}

// DNSetList is a list of DNSets.
//
// +kubebuilder:object:root=true
type DNSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DNSet `json:"items"`
}

// ProxySetSpec is the desired state of a ProxySet: the SQL proxies clients connect through.
type ProxySetSpec struct {
	PodSetSpec `json:",inline"`

	// Deps names the LogSet the proxies join.
	// +required
	Deps PodSetDeps `json:"deps"`
}

// ProxySetStatus is the observed state of a ProxySet.
type ProxySetStatus struct {
	PodSetStatus `json:",inline"`
}

// ProxySet is a set of proxy pods and the ConfigMap they run from. Restarting a proxy drops its client
// connections.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=proxy
// +kubebuilder:printcolumn:name="LogSet",type=string,JSONPath=`.spec.deps.logSet`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Suffix",type=string,JSONPath=`.status.configSuffix`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxySet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ProxySetSpec `json:"spec"`
	// +optional
	Status ProxySetStatus `json:"status,omitempty"`
}

// ProxySetList is a list of ProxySets.
//
// +kubebuilder:object:root=true
type ProxySetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxySet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&LogSet{}, &LogSetList{}, &DNSet{}, &DNSetList{}, &ProxySet{}, &ProxySetList{})
}
