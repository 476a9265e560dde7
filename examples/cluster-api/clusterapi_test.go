package clusterapi

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/ensembletest/ensemble/suite"
)

// TestVersionIsTheResolvedModule: the module directory go list resolves in the test's directory is the one
// of the version the wiring names, so the CRDs and webhook manifests the suite installs are the ones of the
// controllers it runs.
func TestVersionIsTheResolvedModule(t *testing.T) {
	dir, err := suite.ModuleDir(Module)
	if err != nil {
		t.Fatal(err)
	}
	if want := "cluster-api@" + Version; filepath.Base(dir) != want {
		t.Errorf("go list resolves %s to %s, want a directory %s: Version and go.mod disagree", Module, dir, want)
	}
}

func TestModuleFilesExist(t *testing.T) {
	crds, err := CRDPath()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cluster.x-k8s.io_clusters.yaml", "cluster.x-k8s.io_machines.yaml", "cluster.x-k8s.io_machinesets.yaml",
		"cluster.x-k8s.io_machinedeployments.yaml", "cluster.x-k8s.io_machinehealthchecks.yaml"} {
		if _, err := os.Stat(crds + "/" + f); err != nil {
			t.Error(err)
		}
	}
	hooks, err := WebhookPath()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(hooks)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "/mutate-cluster-x-k8s-io-v1beta2-machinedeployment") {
		t.Errorf("%s holds no MachineDeployment defaulting webhook", hooks)
	}
}

// TestFakeInfraCRDsCarryTheContract: each CRD is named as cluster-api computes CRD names and carries the
// v1beta2 contract label naming the served version; the template has no status subresource.
func TestFakeInfraCRDsCarryTheContract(t *testing.T) {
	crds := FakeInfraCRDs()
	var kinds []string
	for _, crd := range crds {
		kinds = append(kinds, crd.Spec.Names.Kind)
		if got := crd.Labels[clusterv1.GroupVersion.String()]; got != InfraGroupVersion.Version {
			t.Errorf("%s: contract label %q, want %q", crd.Name, got, InfraGroupVersion.Version)
		}
		if want := strings.ToLower(crd.Spec.Names.Kind) + "s." + InfraGroup; crd.Name != want {
			t.Errorf("CRD name %s, want %s", crd.Name, want)
		}
		if status := crd.Spec.Versions[0].Subresources != nil; status == (crd.Spec.Names.Kind == "FakeMachineTemplate") {
			t.Errorf("%s: status subresource %v", crd.Name, status)
		}
	}
	if want := []string{"FakeCluster", "FakeMachine", "FakeMachineTemplate"}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	in := &FakeMachine{Spec: FakeMachineSpec{ProviderID: "fake://a/b"}}
	in.Finalizers = []string{FakeMachineFinalizer}
	out := in.DeepCopyObject().(*FakeMachine)
	out.Finalizers[0] = "changed"
	out.Spec.ProviderID = "changed"
	if in.Finalizers[0] != FakeMachineFinalizer || in.Spec.ProviderID != "fake://a/b" {
		t.Errorf("the copy shares state with its source: %+v", in)
	}
}

// namingManager records the name of every controller added to it (controller-runtime's builder adds each
// controller it builds through the manager it was given).
type namingManager struct {
	manager.Manager
	names []string
}

func (m *namingManager) Add(r manager.Runnable) error {
	if v := reflect.Indirect(reflect.ValueOf(r)); v.Kind() == reflect.Struct {
		if f := v.FieldByName("Name"); f.IsValid() && f.Kind() == reflect.String {
			m.names = append(m.names, f.String())
		}
	}
	return m.Manager.Add(r)
}

// TestSetupFakeInfraRegistersTwoControllers builds a manager against an address nothing listens on, with a
// static REST mapper so that nothing contacts it before Start, and checks that SetupFakeInfra adds the
// fakecluster and fakemachine controllers. (Setup's controllers are checked by the suite's AfterSuite, which
// needs each to have run a pass: cluster-api's Machine controller maps list kinds a static mapper lacks.)
func TestSetupFakeInfraRegistersTwoControllers(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	for gvk := range s.AllKnownTypes() {
		mapper.Add(gvk, meta.RESTScopeNamespace)
	}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		MapperProvider:         func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil },
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	nm := &namingManager{Manager: mgr}
	if err := SetupFakeInfra(nm); err != nil {
		t.Fatal(err)
	}
	if want := []string{"fakecluster", "fakemachine"}; !slices.Equal(nm.names, want) {
		t.Errorf("fake controllers added: got %v, want %v", nm.names, want)
	}
}
