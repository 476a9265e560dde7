package pooler_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fakes/dataplane"
	"github.com/ensembletest/ensemble/fakes/pooler"
	"github.com/ensembletest/ensemble/internal/planetest"
)

// Shared by every test of the package: one envtest, one manager running the data plane and the pooler
// simulator, one direct client.
var (
	k8s   client.Client
	store *pooler.Store
)

func TestMain(m *testing.M) {
	store = pooler.New(pooler.Options{})
	os.Exit(planetest.Run(m, planetest.Options{
		Logger: planetest.ErrorLogger(),
		Setup: planetest.ManagerSetup(&k8s, func(mgr ctrl.Manager) error {
			if err := dataplane.New(dataplane.Options{}).SetupWithManager(mgr); err != nil {
				return err
			}
			return store.SetupWithManager(mgr)
		}),
	}))
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pooler-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
