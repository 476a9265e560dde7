package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// testSuite is a Suite with the parts the wrapper needs, no control plane.
func testSuite() *Suite {
	n, sc := newBroadcast(), newScopes()
	return &Suite{scheme: newScheme(), rec: newRecorder(newScheme(), n, sc), stream: newStream(newScheme(), n, sc), gate: newGate(),
		notify: n, requeueClamp: defaultRequeueClamp, requeueCompressAbove: defaultRequeueCompressAbove}
}

// unstartedManager is a real manager on an address nothing listens on: building controllers needs no API server.
func unstartedManager(t *testing.T) manager.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{Scheme: newScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

type runnableSpy struct{ added []manager.Runnable }

// spyManager records what reaches the real manager's Add.
type spyManager struct {
	manager.Manager
	spy *runnableSpy
}

func (m spyManager) Add(r manager.Runnable) error {
	m.spy.added = append(m.spy.added, r)
	return m.Manager.Add(r)
}

type echo struct{ calls int }

func (e *echo) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	e.calls++
	return reconcile.Result{RequeueAfter: 300_000_000_000}, nil // 5 minutes, as a resync
}

// TestWrapsEveryControllerTheBuilderMakes is the self-test of the mechanism ensemble relies on to wrap an
// unmodified operator: controller-runtime's builder hands each controller it builds to the manager's Add,
// with the reconciler in an exported Do field. The day a controller-runtime upgrade breaks that, this test
// fails with the one line Boot would print.
func TestWrapsEveryControllerTheBuilderMakes(t *testing.T) {
	s := testSuite()
	spy := &runnableSpy{}
	wm := s.newWrappingManager(spyManager{unstartedManager(t), spy}, "op", false, nil)
	e := &echo{}
	if err := ctrl.NewControllerManagedBy(wm).For(&corev1.ConfigMap{}).Complete(e); err != nil {
		t.Fatalf("%v", err)
	}
	if err := ctrl.NewControllerManagedBy(wm).Named("second").For(&corev1.Pod{}).Complete(e); err != nil {
		t.Fatalf("%v", err)
	}
	if wm.wrapped["configmap"] != 1 || wm.wrapped["second"] != 1 {
		t.Fatalf("wrapped controllers = %v, want configmap and second: controller-runtime %s no longer hands its controllers to Manager.Add", wm.wrapped, controllerRuntimeVersion())
	}
	s.gate.admit("ns")
	for _, r := range spy.added {
		rec, ok := r.(reconcile.Reconciler)
		if !ok {
			continue
		}
		if _, err := rec.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	ps := s.rec.passes("ns", PassFilter{})
	if len(ps) != 2 || e.calls != 2 || ps[0].Controller != "configmap" || ps[1].Controller != "second" {
		t.Fatalf("passes = %v, calls = %d: a controller's reconcile did not go through the harness's wrapper", ps, e.calls)
	}
	if ps[0].Asked != 300_000_000_000 || ps[0].RequeueAfter != defaultRequeueClamp {
		t.Fatalf("pass %s: the asked 5 minutes were not compressed", ps[0].line())
	}
}

// TestPanickingPassEnds: a reconciler that panics still ends its pass, with the panic as its error, and the
// panic goes on to controller-runtime.
func TestPanickingPassEnds(t *testing.T) {
	s := testSuite()
	s.gate.admit("ns")
	w := &wrappedReconciler{s: s, manager: "op", controller: "boom", inner: reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		panic("nil map")
	})}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach the caller")
			}
		}()
		_, _ = w.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}})
	}()
	ps := s.rec.passes("ns", PassFilter{})
	if len(ps) != 1 || ps[0].End.IsZero() || ps[0].Err == nil || !strings.Contains(ps[0].Err.Error(), "panic: nil map") {
		t.Fatalf("passes = %+v, want one ended pass with the panic as its error", ps)
	}
}

// opaque is a controller the wrapper cannot reach into: it has a controller's methods but no Do field.
type opaque struct{}

func (opaque) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	return reconcile.Result{}, nil
}
func (opaque) Watch(source.Source) error   { return nil }
func (opaque) Start(context.Context) error { return nil }
func (opaque) GetLogger() logr.Logger      { return logr.Discard() }

func TestRefusesAControllerItCannotWrap(t *testing.T) {
	s := testSuite()
	wm := s.newWrappingManager(unstartedManager(t), "op", false, nil)
	err := wm.Add(&opaque{})
	t.Log(err)
	for _, want := range []string{"cannot wrap controller", "controller-runtime " + controllerRuntimeVersion(), "record none of its passes"} {
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Add(opaque) = %v, want one line containing %q", err, want)
		}
	}
	if err := wm.Add(manager.RunnableFunc(func(context.Context) error { return nil })); err != nil {
		t.Fatalf("a runnable that is not a controller was refused: %v", err)
	}
}

// TestRequeueCompressionLeavesShortDeferrals: a requeue of a second or less (cluster-api's "one reconcile per
// object per second" answers an early request with one) is handed to controller-runtime as asked; only a
// longer one is compressed to the clamp, and the pass says which. A negative RequeueCompressAbove compresses
// every delay above the clamp, as all were before.
func TestRequeueCompressionLeavesShortDeferrals(t *testing.T) {
	for _, tc := range []struct {
		above, asked, handed time.Duration
	}{
		{defaultRequeueCompressAbove, 0, 0},
		{defaultRequeueCompressAbove, 30 * time.Millisecond, 30 * time.Millisecond},
		{defaultRequeueCompressAbove, 300 * time.Millisecond, 300 * time.Millisecond},
		{defaultRequeueCompressAbove, time.Second, time.Second},
		{defaultRequeueCompressAbove, 1500 * time.Millisecond, defaultRequeueClamp},
		{defaultRequeueCompressAbove, time.Hour, defaultRequeueClamp},
		{-1, 300 * time.Millisecond, defaultRequeueClamp},
		{-1, 30 * time.Millisecond, 30 * time.Millisecond},
		// A threshold below the clamp never lengthens a delay.
		{10 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond},
	} {
		s := testSuite()
		s.requeueCompressAbove = tc.above
		s.gate.admit("ns")
		w := &wrappedReconciler{s: s, manager: "op", controller: "c", inner: reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{RequeueAfter: tc.asked}, nil
		})}
		res, err := w.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}})
		if err != nil {
			t.Fatal(err)
		}
		p := s.rec.passes("ns", PassFilter{})[0]
		if res.RequeueAfter != tc.handed || p.RequeueAfter != tc.handed || p.Asked != tc.asked || p.Compressed() != (tc.handed < tc.asked) {
			t.Errorf("RequeueCompressAbove %s, asked %s: handed %s, pass %s (compressed %v); want %s handed and recorded",
				tc.above, tc.asked, res.RequeueAfter, p.line(), p.Compressed(), tc.handed)
		}
	}
}
