package suite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ensembletest/ensemble/suite"
)

// labeller stands for an operator's reconciler: it labels every ConfigMap once.
type labeller struct{ client.Client }

func (l *labeller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := l.Get(ctx, req.NamespacedName, cm); err != nil || cm.Labels["seen"] == "yes" {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Labels = map[string]string{"seen": "yes"}
	return ctrl.Result{}, l.Patch(ctx, cm, patch, client.FieldOwner("labeller"))
}

// SetupWithManager is the operator's own setup, unchanged for ensemble.
func (l *labeller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(l)
}

// catalog is an empty defect catalog: this operator has no pinned defect.
type catalog struct{}

func (catalog) Lookup(string) (string, bool) { return "", false }

// An operator is booted with its own setup, and a test asks its Case what the controllers did. The names
// here are this example's; an operator's suite does the same in its BeforeSuite (or a TestMain) and its
// specs.
func Example() {
	var t *testing.T // the test's *testing.T, or Ginkgo's GinkgoT()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	s, err := suite.Boot(context.Background(), suite.Options{
		Scheme:     scheme,
		WatchKinds: []client.Object{&corev1.ConfigMap{}},
		Pins:       catalog{},
		Managers: []suite.ManagerOptions{{Name: "operator", Register: func(_ context.Context, mgr manager.Manager) error {
			return (&labeller{Client: mgr.GetClient()}).SetupWithManager(mgr)
		}}},
	})
	if err != nil {
		fmt.Println(err) // one line that says what to do, e.g. run `make envtest-assets`
		return
	}
	defer s.Stop()

	c := s.NewCase(t) // a fresh namespace, admitted at the gate, cleaned up after the test
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	c.RequireQuiescent(time.Second, 20*time.Second)
	for _, w := range c.Writes(suite.WriteFilter{Manager: "operator"}) {
		fmt.Println(w.Controller, w.Verb, w.Kind, w.Name) // configmap patch ConfigMap a
	}
	fmt.Println(c.FieldWriters("ConfigMap", "a")["metadata.labels.seen"]) // [operator/configmap]
}
