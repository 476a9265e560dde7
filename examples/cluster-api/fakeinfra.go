package clusterapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/contract"

	"github.com/ensembletest/ensemble/suite"
)

// The fake infrastructure provider: FakeCluster, FakeMachine and FakeMachineTemplate in
// infrastructure.ensemble.dev/v1alpha1, whose CRDs carry the cluster.x-k8s.io/v1beta2 contract label. Its
// reconcilers play a cloud: a FakeCluster is provisioned at once with the envtest API server as its control
// plane endpoint (the envtest is also the workload cluster), and a FakeMachine, once its Machine has bootstrap
// data, gets a Ready Node in the envtest carrying its providerID, and is provisioned.
const (
	// InfraGroup is the fake provider's API group.
	InfraGroup = "infrastructure.ensemble.dev"
	// FakeInfraManagerName is the ensemble manager that runs the fake provider's reconcilers, gated like
	// cluster-api's, so that the Nodes it creates in a pass of a Case's FakeMachine are the Case's.
	FakeInfraManagerName = "fakeinfra"
	// FakeMachineFinalizer holds a FakeMachine until the fake has deleted its Node, as deleting a cloud
	// machine removes its node.
	FakeMachineFinalizer = "infrastructure.ensemble.dev/node"
	// ProviderIDPrefix begins every providerID the fake hands out: fake://<namespace>/<FakeMachine name>.
	ProviderIDPrefix = "fake://"
)

// InfraGroupVersion is the fake provider's API version.
var InfraGroupVersion = schema.GroupVersion{Group: InfraGroup, Version: "v1alpha1"}

// Initialization is the v1beta2 contract's status.initialization of an infrastructure object.
type Initialization struct {
	// Provisioned tells cluster-api the infrastructure is ready.
	Provisioned *bool `json:"provisioned,omitempty"`
}

// FakeCluster is the fake provider's InfraCluster.
type FakeCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              FakeClusterSpec   `json:"spec,omitempty"`
	Status            FakeClusterStatus `json:"status,omitempty"`
}

// FakeClusterSpec holds the control plane endpoint the fake fills in (the contract's spec.controlPlaneEndpoint).
type FakeClusterSpec struct {
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitzero"`
}

// FakeClusterStatus is the contract's status of an InfraCluster.
type FakeClusterStatus struct {
	Initialization Initialization `json:"initialization,omitzero"`
}

// FakeMachine is the fake provider's InfraMachine.
type FakeMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              FakeMachineSpec   `json:"spec,omitempty"`
	Status            FakeMachineStatus `json:"status,omitempty"`
}

// FakeMachineSpec holds the contract's spec.providerID, which the fake fills in.
type FakeMachineSpec struct {
	ProviderID string `json:"providerID,omitempty"`
}

// FakeMachineStatus is the contract's status of an InfraMachine.
type FakeMachineStatus struct {
	Initialization Initialization `json:"initialization,omitzero"`
}

// FakeMachineTemplate is the fake provider's InfraMachineTemplate: MachineSets clone spec.template into
// FakeMachines.
type FakeMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              FakeMachineTemplateSpec `json:"spec,omitempty"`
}

// FakeMachineTemplateSpec is the template of the FakeMachines made from it.
type FakeMachineTemplateSpec struct {
	Template FakeMachineTemplateResource `json:"template"`
}

// FakeMachineTemplateResource is a FakeMachine's metadata and spec, as MachineSets clone them.
type FakeMachineTemplateResource struct {
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitzero"`
	Spec       FakeMachineSpec      `json:"spec,omitzero"`
}

// FakeClusterList, FakeMachineList and FakeMachineTemplateList are the kinds' lists.
type (
	FakeClusterList struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty"`
		Items           []FakeCluster `json:"items"`
	}
	FakeMachineList struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty"`
		Items           []FakeMachine `json:"items"`
	}
	FakeMachineTemplateList struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty"`
		Items           []FakeMachineTemplate `json:"items"`
	}
)

// deepCopy copies in through its JSON form: the kinds are plain data, and a JSON round trip is all the copy
// the client and cache need of them (no generated deepcopy code for six small types).
func deepCopy[T any](in *T) *T {
	b, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("clusterapi: copying %T: %v", in, err))
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(fmt.Sprintf("clusterapi: copying %T: %v", in, err))
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *FakeCluster) DeepCopyObject() runtime.Object { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *FakeClusterList) DeepCopyObject() runtime.Object { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *FakeMachine) DeepCopyObject() runtime.Object { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *FakeMachineList) DeepCopyObject() runtime.Object { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *FakeMachineTemplate) DeepCopyObject() runtime.Object { return deepCopy(in) }

// DeepCopyObject implements runtime.Object.
func (in *FakeMachineTemplateList) DeepCopyObject() runtime.Object { return deepCopy(in) }

func addFakeInfra(s *runtime.Scheme) error {
	s.AddKnownTypes(InfraGroupVersion, &FakeCluster{}, &FakeClusterList{}, &FakeMachine{}, &FakeMachineList{},
		&FakeMachineTemplate{}, &FakeMachineTemplateList{})
	metav1.AddToGroupVersion(s, InfraGroupVersion)
	return nil
}

// FakeInfraCRDs returns the CRDs of FakeCluster, FakeMachine and FakeMachineTemplate, for suite.Options.CRDs:
// namespaced, one served and stored version, a status subresource (not on the template), spec and status
// kept as written, and the label cluster.x-k8s.io/v1beta2: v1alpha1 by which cluster-api reads the contract
// version and apiVersion a kind serves.
func FakeInfraCRDs() []*apiextensionsv1.CustomResourceDefinition {
	var out []*apiextensionsv1.CustomResourceDefinition
	open := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	for _, kind := range []string{"FakeCluster", "FakeMachine", "FakeMachineTemplate"} {
		version := apiextensionsv1.CustomResourceDefinitionVersion{Name: InfraGroupVersion.Version, Served: true, Storage: true,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": open, "status": open}}}}
		if kind != "FakeMachineTemplate" {
			version.Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
		}
		plural := strings.ToLower(kind) + "s"
		out = append(out, &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: contract.CalculateCRDName(InfraGroup, kind),
				Labels: map[string]string{clusterv1.GroupVersion.String(): InfraGroupVersion.Version}},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: InfraGroup, Scope: apiextensionsv1.NamespaceScoped,
				Names:    apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version}},
		})
	}
	return out
}

// FakeInfraManagerOptions returns the gated manager that runs the fake provider's reconcilers.
func FakeInfraManagerOptions() suite.ManagerOptions {
	return suite.ManagerOptions{Name: FakeInfraManagerName, Register: func(_ context.Context, mgr manager.Manager) error {
		return SetupFakeInfra(mgr)
	}}
}

// SetupFakeInfra registers the fakecluster and fakemachine reconcilers with mgr, whose scheme must come
// from Scheme. The FakeCluster's endpoint is mgr's API server.
func SetupFakeInfra(mgr manager.Manager) error {
	u, err := url.Parse(mgr.GetConfig().Host)
	if err != nil {
		return fmt.Errorf("clusterapi: fake infrastructure: API server address %q: %w", mgr.GetConfig().Host, err)
	}
	host, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		return fmt.Errorf("clusterapi: fake infrastructure: API server address %q has no port: %w", mgr.GetConfig().Host, err)
	}
	port, _ := strconv.Atoi(portText)
	endpoint := clusterv1.APIEndpoint{Host: host, Port: int32(port)}
	if err := ctrl.NewControllerManagedBy(mgr).For(&FakeCluster{}).Named("fakecluster").
		Complete(&fakeClusterReconciler{c: mgr.GetClient(), endpoint: endpoint}); err != nil {
		return fmt.Errorf("clusterapi: fakecluster controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&FakeMachine{}).Named("fakemachine").
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(InfraGroupVersion.WithKind("FakeMachine")))).
		Complete(&fakeMachineReconciler{c: mgr.GetClient()}); err != nil {
		return fmt.Errorf("clusterapi: fakemachine controller: %w", err)
	}
	return nil
}

// fakeClusterReconciler provisions a FakeCluster at once: the endpoint first, then status.
type fakeClusterReconciler struct {
	c        client.Client
	endpoint clusterv1.APIEndpoint
}

func (r *fakeClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fc := &FakeCluster{}
	if err := r.c.Get(ctx, req.NamespacedName, fc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if !fc.Spec.ControlPlaneEndpoint.IsValid() {
		base := fc.DeepCopyObject().(client.Object)
		fc.Spec.ControlPlaneEndpoint = r.endpoint
		if err := r.c.Patch(ctx, fc, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !ptr.Deref(fc.Status.Initialization.Provisioned, false) {
		base := fc.DeepCopyObject().(client.Object)
		fc.Status.Initialization.Provisioned = ptr.To(true)
		if err := r.c.Status().Patch(ctx, fc, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// fakeMachineReconciler boots a FakeMachine: once the Machine that owns it has bootstrap data (a Secret it can
// read), it creates a Node, Ready and under no pressure, with the machine's providerID, then reports the providerID and provisioned.
// A deleted FakeMachine's Node is deleted before its finalizer is released.
type fakeMachineReconciler struct{ c client.Client }

// NodeName is the name of the Node of the FakeMachine namespace/name: Nodes are cluster-scoped, so it
// carries the namespace.
func NodeName(namespace, name string) string { return namespace + "-" + name }

func (r *fakeMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fm := &FakeMachine{}
	if err := r.c.Get(ctx, req.NamespacedName, fm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName(fm.Namespace, fm.Name)}}
	if !fm.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(fm, FakeMachineFinalizer) {
			return ctrl.Result{}, nil
		}
		if err := r.c.Delete(ctx, node); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		base := fm.DeepCopyObject().(client.Object)
		controllerutil.RemoveFinalizer(fm, FakeMachineFinalizer)
		return ctrl.Result{}, r.c.Patch(ctx, fm, client.MergeFrom(base))
	}
	m, err := util.GetOwnerMachine(ctx, r.c, fm.ObjectMeta)
	if err != nil || m == nil || m.Spec.Bootstrap.DataSecretName == nil {
		return ctrl.Result{}, err // the Machine's update (owner reference, bootstrap data) brings the next pass
	}
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: fm.Namespace, Name: *m.Spec.Bootstrap.DataSecretName}, &corev1.Secret{}); err != nil {
		return ctrl.Result{}, fmt.Errorf("bootstrap data of Machine %s: %w", m.Name, err)
	}
	if !controllerutil.ContainsFinalizer(fm, FakeMachineFinalizer) {
		base := fm.DeepCopyObject().(client.Object)
		controllerutil.AddFinalizer(fm, FakeMachineFinalizer)
		if err := r.c.Patch(ctx, fm, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, err
		}
	}
	providerID := ProviderIDPrefix + fm.Namespace + "/" + fm.Name
	if err := r.c.Get(ctx, client.ObjectKeyFromObject(node), node); apierrors.IsNotFound(err) {
		node.Spec.ProviderID = providerID
		if err := r.c.Create(ctx, node); err != nil {
			return ctrl.Result{}, err
		}
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if !nodeHealthy(node) {
		base := node.DeepCopy()
		now := metav1.Now()
		node.Status.Conditions = []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		}
		for i := range node.Status.Conditions {
			node.Status.Conditions[i].LastHeartbeatTime, node.Status.Conditions[i].LastTransitionTime = now, now
			node.Status.Conditions[i].Message = "the fake infrastructure provider's node"
		}
		if err := r.c.Status().Patch(ctx, node, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, err
		}
	}
	if fm.Spec.ProviderID != providerID {
		base := fm.DeepCopyObject().(client.Object)
		fm.Spec.ProviderID = providerID
		if err := r.c.Patch(ctx, fm, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !ptr.Deref(fm.Status.Initialization.Provisioned, false) {
		base := fm.DeepCopyObject().(client.Object)
		fm.Status.Initialization.Provisioned = ptr.To(true)
		if err := r.c.Status().Patch(ctx, fm, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// nodeHealthy tells whether n reports the conditions cluster-api's NodeHealthy reads: Ready, and no
// memory, disk or PID pressure.
func nodeHealthy(n *corev1.Node) bool {
	want := map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: corev1.ConditionTrue,
		corev1.NodeMemoryPressure: corev1.ConditionFalse, corev1.NodeDiskPressure: corev1.ConditionFalse, corev1.NodePIDPressure: corev1.ConditionFalse}
	for _, c := range n.Status.Conditions {
		if want[c.Type] == c.Status {
			delete(want, c.Type)
		}
	}
	return len(want) == 0
}
