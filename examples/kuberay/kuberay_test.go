package kuberay

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	"github.com/ensembletest/ensemble/suite"
)

// Setup fits ensemble's registration seam.
var _ = suite.ManagerOptions{Name: "kuberay", Register: func(ctx context.Context, mgr manager.Manager) error {
	return Setup(ctx, mgr)
}}

func TestCRDPathHoldsTheRayCRDs(t *testing.T) {
	dir, err := CRDPath()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ray.io_rayclusters.yaml": "RayCluster",
		"ray.io_rayjobs.yaml":     "RayJob",
		"ray.io_rayservices.yaml": "RayService",
	}
	for file, kind := range want {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Kind string `json:"kind"`
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != rayv1.GroupVersion.Group || crd.Spec.Names.Kind != kind {
			t.Errorf("%s: got %s of %s/%s, want CustomResourceDefinition of ray.io/%s", file, crd.Kind, crd.Spec.Group, crd.Spec.Names.Kind, kind)
		}
	}
}

// TestCRDsComeFromTheVersionBuilt: CRDPath's go list resolves the ray-operator version this module's wiring
// names (Version), so a version's directory loads its own version's CRDs.
func TestCRDsComeFromTheVersionBuilt(t *testing.T) {
	dir, err := CRDPath()
	if err != nil {
		t.Fatal(err)
	}
	if want := "@" + Version + string(filepath.Separator); !strings.Contains(dir, want) {
		t.Errorf("CRDPath %s is not in ray-operator %s's module directory: run the tests in the directory of the version (examples/kuberay or examples/kuberay/v1.4.0)", dir, Version)
	}
}

func TestSchemeHoldsClientGoAndRayKinds(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []runtime.Object{&corev1.Pod{}, &corev1.Service{}, &batchv1.Job{}, &rayv1.RayCluster{}, &rayv1.RayJob{}, &rayv1.RayService{}} {
		if gvks, _, err := s.ObjectKinds(obj); err != nil || len(gvks) == 0 {
			t.Errorf("%T not in scheme: %v", obj, err)
		}
	}
}

// TestSetupReturnsNewReconcilersPanic: with no API server to map Pods, KubeRay's NewReconciler panics on
// its field index; Setup hands that back as an error.
func TestSetupReturnsNewReconcilersPanic(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(t.Context(), mgr); err == nil || !strings.Contains(err.Error(), "kuberay: RayCluster reconciler") {
		t.Fatalf("want the RayCluster reconciler's panic as an error, got %v", err)
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

// TestSetupRegistersTheThreeControllers builds a manager against an address nothing listens on, with a
// static REST mapper so nothing contacts it before Start, and checks Setup adds controllers named
// raycluster, rayservice and rayjob (controller-runtime's default: the lowercased kind of For).
func TestSetupRegistersTheThreeControllers(t *testing.T) {
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
	if err := Setup(t.Context(), nm); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(nm.names, ","), "raycluster,rayservice,rayjob"; got != want {
		t.Errorf("controllers added: got %s, want %s", got, want)
	}
}
