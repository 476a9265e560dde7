package suite

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// wrappingManager is the manager.Manager that ManagerOptions.Register receives. It is the real manager but
// for Add, which wraps every controller handed to it (the controller-runtime builder adds each controller it
// builds through Add) before passing it on. Its writes are recorded below any client, by the transport of
// the rest.Config it was made with (recordingTransport).
type wrappingManager struct {
	manager.Manager
	s       *Suite
	name    string
	ungated bool
	// wrapped counts the controllers wrapped, by controller name; err is the first controller that could not be.
	wrapped map[string]int
	err     error
	// fence is set when a restart point stopped this manager instance: its later writes are refused (its
	// transport reads it).
	fence *atomic.Pointer[perturb.Point]
	// stopped is when this instance was stopped or fenced (nil while it runs): a pass that ended after it
	// ended by the stop (see recorder.cutByStop).
	stopped atomic.Pointer[time.Time]
	// workers counts the wrapped controllers whose queue is observed and those whose workers have started
	// (a worker's first Get from the queue: its sources have synced); see workersRunning.
	workersMu          sync.Mutex
	queues, running    int
	workersRunningOnce sync.Once
	workersRunningCh   chan struct{}
}

// workersRunning is closed once every wrapped controller with an observed queue has started its workers
// (at once when there is none), so the controllers reconcile what their sources delivered.
func (m *wrappingManager) workersRunning() <-chan struct{} {
	m.workersMu.Lock()
	defer m.workersMu.Unlock()
	if m.running >= m.queues {
		m.workersRunningOnce.Do(func() { close(m.workersCh()) })
	}
	return m.workersCh()
}

// workersCh is the channel workersRunning closes (called with workersMu held).
func (m *wrappingManager) workersCh() chan struct{} {
	if m.workersRunningCh == nil {
		m.workersRunningCh = make(chan struct{})
	}
	return m.workersRunningCh
}

// workerStarted notes that one more observed controller's workers asked their queue for work.
func (m *wrappingManager) workerStarted() {
	m.workersMu.Lock()
	defer m.workersMu.Unlock()
	if m.running++; m.running >= m.queues {
		m.workersRunningOnce.Do(func() { close(m.workersCh()) })
	}
}

func (s *Suite) newWrappingManager(mgr manager.Manager, name string, ungated bool, fence *atomic.Pointer[perturb.Point]) *wrappingManager {
	return &wrappingManager{Manager: mgr, s: s, name: name, ungated: ungated, wrapped: map[string]int{}, fence: fence}
}

// Add wraps r first: a controller with the gate and pass accounting, any other Runnable with its name (see
// namedRunnable). A controller that cannot be wrapped is refused with an error that names it and the
// controller-runtime version: its passes would otherwise go unrecorded.
func (m *wrappingManager) Add(r manager.Runnable) error {
	name, isController, err := m.wrap(r)
	if err != nil {
		if m.err == nil {
			m.err = err
		}
		return err
	}
	if isController {
		m.wrapped[name]++
		return m.Manager.Add(r)
	}
	return m.Manager.Add(nameRunnable(r))
}

var reconcilerType = reflect.TypeFor[reconcile.Reconciler]()

// wrap replaces the reconciler of a controller built by controller-runtime (its exported Do field) with the
// harness's wrapper. It reports whether r is a controller at all (a runnable with Watch, Start and
// GetLogger methods); a controller whose reconciler it cannot reach is an error.
func (m *wrappingManager) wrap(r manager.Runnable) (string, bool, error) {
	v := reflect.ValueOf(r)
	if !looksLikeController(v) {
		return "", false, nil
	}
	name := fmt.Sprintf("%T", r)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return name, true, m.cannotWrap(name, r, "it is not a pointer to a struct")
	}
	if f := v.Elem().FieldByName("Name"); f.IsValid() && f.Kind() == reflect.String {
		name = f.String()
	}
	do := v.Elem().FieldByName("Do")
	switch {
	case !do.IsValid():
		return name, true, m.cannotWrap(name, r, "it has no exported Do field holding its reconciler")
	case do.Type() != reconcilerType:
		return name, true, m.cannotWrap(name, r, fmt.Sprintf("its Do field is a %s, not a reconcile.Reconciler (a typed request?)", do.Type()))
	case !do.CanSet():
		return name, true, m.cannotWrap(name, r, "its Do field cannot be set")
	case do.IsNil():
		return name, true, m.cannotWrap(name, r, "its Do field is nil")
	}
	inner := do.Interface().(reconcile.Reconciler)
	if _, done := inner.(*wrappedReconciler); !done {
		do.Set(reflect.ValueOf(reconcile.Reconciler(&wrappedReconciler{s: m.s, manager: m.name, controller: name, ungated: m.ungated, inner: inner, instance: &m.stopped})))
		m.observeQueue(v.Elem().FieldByName("NewQueue"), name)
	}
	return name, true, nil
}

// newQueueFunc is the type of a controller's NewQueue field in controller-runtime v0.25.
type newQueueFunc = func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request]

// observeQueue wraps the queue the controller will build, so that an add by an event handler or a source (no
// delay, no rate limit: not the controller's own requeue) is noted for Pass.Event. A controller without such
// a field is left as it is; its passes then never report Event.
func (m *wrappingManager) observeQueue(f reflect.Value, controller string) {
	if !f.IsValid() || !f.CanSet() || f.Type() != reflect.TypeFor[newQueueFunc]() || f.IsNil() {
		return
	}
	orig := f.Interface().(newQueueFunc)
	note := func(req reconcile.Request) { m.s.rec.queuedByEvent(m.name, controller, req) }
	m.workersMu.Lock()
	m.queues++
	m.workersMu.Unlock()
	f.Set(reflect.ValueOf(newQueueFunc(func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		q := orig(name, rl)
		var once sync.Once
		started := func() { once.Do(m.workerStarted) }
		if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
			return &observedPriorityQueue{PriorityQueue: pq, note: note, started: started}
		}
		return &observedQueue{TypedRateLimitingInterface: q, note: note, started: started}
	})))
}

// observedPriorityQueue is controller-runtime's priority queue with its immediate adds noted and its
// workers' first Get reported.
type observedPriorityQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	note    func(reconcile.Request)
	started func()
}

// GetWithPriority reports the worker's first call, then gets as the priority queue does.
func (q *observedPriorityQueue) GetWithPriority() (reconcile.Request, int, bool) {
	q.started()
	return q.PriorityQueue.GetWithPriority()
}

func (q *observedPriorityQueue) Add(item reconcile.Request) {
	q.note(item)
	q.PriorityQueue.Add(item)
}

func (q *observedPriorityQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.After == 0 && !o.RateLimited {
		for _, it := range items {
			q.note(it)
		}
	}
	q.PriorityQueue.AddWithOpts(o, items...)
}

// observedQueue is a plain rate-limiting queue with its immediate adds noted (controller-runtime wraps it
// for priorities and sends immediate adds to Add).
type observedQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	note    func(reconcile.Request)
	started func()
}

// Get reports the worker's first call, then gets as the queue does.
func (q *observedQueue) Get() (reconcile.Request, bool) {
	q.started()
	return q.TypedRateLimitingInterface.Get()
}

func (q *observedQueue) Add(item reconcile.Request) {
	q.note(item)
	q.TypedRateLimitingInterface.Add(item)
}

func (m *wrappingManager) cannotWrap(name string, r manager.Runnable, why string) error {
	return fmt.Errorf("suite: manager %s: cannot wrap controller %q (%T) with controller-runtime %s: %s; ensemble would record none of its passes (it supports the controllers controller-runtime v0.25's builder makes)",
		m.name, name, r, controllerRuntimeVersion(), why)
}

// looksLikeController reports whether v has the methods of a controller-runtime controller.
func looksLikeController(v reflect.Value) bool {
	for _, method := range []string{"Watch", "Start", "GetLogger", "Reconcile"} {
		if !v.MethodByName(method).IsValid() {
			return false
		}
	}
	return true
}

// controllerRuntimeVersion is the version of sigs.k8s.io/controller-runtime this binary was built with: from
// the build info, or (test binaries carry no dependency list) from the source path of one of its functions,
// which holds "controller-runtime@<version>" when it was built from the module cache.
func controllerRuntimeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "sigs.k8s.io/controller-runtime" {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	file, _ := runtime.FuncForPC(reflect.ValueOf(ctrl.NewControllerManagedBy).Pointer()).FileLine(0)
	if _, after, ok := strings.Cut(file, "controller-runtime@"); ok {
		if v, _, ok := strings.Cut(after, "/"); ok {
			return v
		}
	}
	return "(unknown version)"
}

// markStopped notes the moment the instance is stopped or fenced, the first time only.
func (m *wrappingManager) markStopped() {
	now := time.Now()
	m.stopped.CompareAndSwap(nil, &now)
}

// wrappedReconciler is what every wrapped controller reconciles with: the gate, pass accounting and
// requeue compression around the operator's own reconciler.
type wrappedReconciler struct {
	s                   *Suite
	manager, controller string
	ungated             bool
	inner               reconcile.Reconciler
	// instance is when the manager instance was stopped (wrappingManager.stopped); nil outside one.
	instance *atomic.Pointer[time.Time]
}

func (r *wrappedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	p := r.s.rec.beginPass(r.manager, r.controller, req, r.instance)
	defer func() {
		// A panicking reconciler still ends its pass, with the panic as its error; controller-runtime then
		// handles the panic as it would without the harness.
		if v := recover(); v != nil {
			r.s.rec.endPass(p, false, fmt.Errorf("panic: %v", v), 0, 0)
			panic(v)
		}
	}()
	if !r.ungated && !r.s.gate.admitted(p.scope) {
		r.s.rec.endPass(p, true, nil, 0, 0)
		return ctrl.Result{}, nil
	}
	res, err := r.inner.Reconcile(context.WithValue(ctx, passCtxKey{}, p), req)
	asked := res.RequeueAfter
	res.RequeueAfter = r.s.handedRequeue(asked)
	r.s.rec.endPass(p, false, err, res.RequeueAfter, asked)
	return res, err
}

// handedRequeue is the RequeueAfter requeue compression hands controller-runtime for an asked one: asked when
// compression is off (a negative RequeueClamp), when asked is at most RequeueClamp, or when it is at most
// RequeueCompressAbove (a short deliberate deferral); else RequeueClamp (docs/architecture.md §3 Gate,
// recorder and requeue compression).
func (s *Suite) handedRequeue(asked time.Duration) time.Duration {
	if s.requeueClamp <= 0 || asked <= s.requeueClamp || asked <= s.requeueCompressAbove {
		return asked
	}
	return s.requeueClamp
}

// Compressed reports whether requeue compression shortened the pass's requeue: controller-runtime was handed
// RequeueAfter instead of the Asked delay.
func (p Pass) Compressed() bool { return p.RequeueAfter < p.Asked }
