package dataplane_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fakes/dataplane"
	"github.com/ensembletest/ensemble/internal/planetest"
)

// Shared by every test of the package: one envtest, one manager running the DataPlane, one direct client.
var (
	k8s client.Client
	dp  *dataplane.DataPlane
)

const configSuffix = "matrixorigin.io/config-suffix"

func TestMain(m *testing.M) {
	dp = dataplane.New(dataplane.Options{RestartAnnotations: []string{configSuffix}})
	os.Exit(planetest.Run(m, planetest.Options{
		Logger: planetest.ErrorLogger(),
		Setup:  planetest.ManagerSetup(&k8s, dp.SetupWithManager),
	}))
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
