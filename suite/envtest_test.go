package suite

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ensembletest/ensemble/internal/controlplane"
)

// marker is a converging controller: it sets data.seen on every ConfigMap once.
type marker struct{ c client.Client }

func (m *marker) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := m.c.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Data["seen"] == "yes" {
		return ctrl.Result{RequeueAfter: time.Hour}, nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["seen"] = "yes"
	return ctrl.Result{}, m.c.Patch(ctx, cm, patch, client.FieldOwner("marker"))
}

// TestPlainTestingT boots the harness from a plain *testing.T (no Ginkgo), runs a converging controller
// through a Case, and checks that Stop leaves no control-plane process and no goroutine of the suite.
func TestPlainTestingT(t *testing.T) {
	if _, err := AssetsDir(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := Boot(t.Context(), Options{Scheme: newScheme(), WatchKinds: []client.Object{&corev1.ConfigMap{}},
		Managers: []ManagerOptions{{Name: "test", Register: func(mgr manager.Manager, w Wiring) error {
			m := &marker{c: w.Client("marker")}
			return ctrl.NewControllerManagedBy(mgr).Named("marker").For(&corev1.ConfigMap{}).Complete(w.Reconciler("marker", m))
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("envtest boot %s, ready %s", s.EnvtestBoot, s.Ready)
	if len(controlplane.ChildControlPlanes()) != 2 {
		t.Fatalf("want kube-apiserver and etcd as children, got pids %v", controlplane.ChildControlPlanes())
	}

	t.Run("case", func(t *testing.T) {
		c := s.NewCase(t)
		if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m"}}); err != nil {
			t.Fatal(err)
		}
		c.RequireQuiescent(200*time.Millisecond, 10*time.Second)
		ws := c.Writes(WriteFilter{Controller: "marker"})
		if len(ws) != 1 || ws[0].Pass == 0 || ws[0].Verb != "patch" || ws[0].FieldOwner != "marker" || ws[0].Kind != "ConfigMap" {
			t.Fatalf("marker writes = %v, want one patch attributed to a pass", ws)
		}
		ps := c.Passes(PassFilter{Controller: "marker"})
		if last := ps[len(ps)-1]; last.Asked != time.Hour || last.RequeueAfter != 50*time.Millisecond {
			t.Fatalf("last pass %v: want the asked hour compressed to 50ms", last)
		}
	})

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if left := controlplane.ChildControlPlanes(); len(left) != 0 {
		t.Fatalf("control-plane processes left after Stop: %v", left)
	}
}
