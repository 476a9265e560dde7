package dataplane_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ensembletest/ensemble/internal/controlplane"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ensembletest/ensemble/fakes/dataplane"
)

// Shared by every test of the package: one envtest, one manager running the DataPlane, one direct client.
var (
	k8s client.Client
	dp  *dataplane.DataPlane
)

const configSuffix = "matrixorigin.io/config-suffix"

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctrl.SetLogger(controlplane.ErrorLogger())
	plane, err := controlplane.Start(&envtest.Environment{}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = plane.Stop() }()
	cfg := plane.Config

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		panic(err)
	}
	dp = dataplane.New(dataplane.Options{RestartAnnotations: []string{configSuffix}})
	if err := dp.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	stop := controlplane.RunManager(mgr)
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

func ptr[T any](v T) *T { return &v }

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "dp-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
