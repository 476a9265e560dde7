// Package pooler is the Multigres topology fake: an in-memory topo.Store (cells, databases, poolers per
// namespace) plus a simulator of the processes that write to the real topology: the pooler of each pool pod
// (registers itself a delay after its pod runs) and multiorch (elects a shard's primary once the shard's
// multiorch pod is Ready). Topology writes produce no Kubernetes event, as with the real etcd topology: an
// operator must requeue to see them.
//
// Wire it with New(opts).SetupWithManager(mgr) and hand the *Store to the operator as its topo.Store. Faults
// (Hold/Release, FreezeElections, Unavailable, SetLatency, Misreport) are switched per namespace at any time.
// Every method is safe for concurrent use.
//
// A pooler whose pod is deleted stays in topology, as it does in the real system, until the operator prunes
// it with SetLifecycle(SHUTDOWN); its posture turns false (Initialized, AcceptingConnections) once the
// simulator sees the pod gone. A pod recreated under the same name re-registers the same pooler (same Name)
// with Lifecycle SERVING and an unknown role. When a shard has no SERVING PRIMARY (never elected, or its
// primary pruned) multiorch elects one among the SERVING poolers whose pods run.
package pooler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ensembletest/ensemble/fakes/internal/trigger"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
)

// ControllerName names the simulator's controller (pooler registration and multiorch elections).
const ControllerName = "pooler-sim"

// Pod labels the simulator reads (the Multigres operator's identity labels).
const (
	// LabelDatabase carries the database name (Pooler.Key.Database); pool and multiorch pods.
	LabelDatabase = "multigres.com/database"
	// LabelTableGroup carries the table group name (Pooler.Key.TableGroup); pool and multiorch pods.
	LabelTableGroup = "multigres.com/tablegroup"
	// LabelShard carries the shard name (Pooler.Key.Shard); pool and multiorch pods.
	LabelShard = "multigres.com/shard"
	// LabelPool carries the pool name; pool pods only (not read by the simulator).
	LabelPool = "multigres.com/pool"
	// LabelCell carries the cell (Pooler.Cell); pool and multiorch pods.
	LabelCell = "multigres.com/cell"
	// LabelComponent is app.kubernetes.io/component: ComponentShardPool or ComponentMultiorch.
	LabelComponent = "app.kubernetes.io/component"
	// ComponentShardPool marks pool pods (one pooler each).
	ComponentShardPool = "shard-pool"
	// ComponentMultiorch marks multiorch pods (one per shard and cell).
	ComponentMultiorch = "multiorch"
)

// PoolerNamePrefix prefixes a pool pod's name to form its pooler's Name ("multipooler-<pod name>"), so a
// Name is never mistaken for a Hostname.
const PoolerNamePrefix = "multipooler-"

// ErrUnknownPooler is returned (wrapped) by SetLifecycle for a pooler name not in the namespace's topology.
var ErrUnknownPooler = errors.New("unknown pooler")

// Options configures the simulator. A zero field takes its default.
type Options struct {
	// RegistrationDelay is the time from the simulator first seeing a pool pod in phase Running to its pooler
	// registering (unless the namespace is held). Default 20ms.
	RegistrationDelay time.Duration
	// ElectionDelay is the time from a shard having both a Ready multiorch pod and a registered SERVING pooler
	// with a running pod, and no SERVING primary, to multiorch electing one. Default 30ms.
	ElectionDelay time.Duration
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options { return Options{}.withDefaults() }

func (o Options) withDefaults() Options {
	if o.RegistrationDelay <= 0 {
		o.RegistrationDelay = 20 * time.Millisecond
	}
	if o.ElectionDelay <= 0 {
		o.ElectionDelay = 30 * time.Millisecond
	}
	return o
}

// Entry is one topology write (by the operator through the Store, or by the simulated poolers and multiorch)
// or one fault switch.
type Entry struct {
	// Time is when the write happened.
	Time time.Time
	// Namespace is the topology's namespace.
	Namespace string
	// Op is one of: "register-cell", "register-database", "set-lifecycle" (operator calls, logged even when
	// they change nothing); "register" (a pooler registers), "elect" (multiorch elects a primary), "role"
	// (multiorch assigns a role); "queue" (a registration held by Hold), "hold", "release",
	// "freeze-elections", "unavailable", "latency", "misreport" (fault switches).
	Op string
	// Pooler is the pooler's Name when the entry concerns one, else "".
	Pooler string
	// Detail describes the write (e.g. "cell=zone1", "SERVING -> SHUTDOWN", "PRIMARY of db/tg/0").
	Detail string
	// Changed is false for an operator call that found the topology already as asked (idempotent repeat) and
	// for a call refused with an error.
	Changed bool
	// Err is the error returned to the caller, else "".
	Err string
}

// Store is the in-memory topology and the simulator state. Create it with New.
type Store struct {
	// Sim is the "pooler-sim" controller. Set Sim.Client before setup to wire a client of your own.
	Sim *SimReconciler

	opts Options

	mu     sync.Mutex
	spaces map[string]*space
	log    []Entry
}

var _ topo.Store = (*Store)(nil)

type space struct {
	cells, databases map[string]bool
	poolers          map[string]*record // by pooler Name
	pods             map[string]*podTrack
	shards           map[topo.ShardKey]*shardTrack
	queued           map[string]bool // pooler Names waiting for Release
	held             bool
	frozen           bool
	unavailable      bool
	latency          time.Duration
	misreport        map[string]string
	// calls are when each operator call on the namespace began, in order (CallTimes).
	calls []time.Time
}

type record struct {
	p          topo.Pooler
	podUID     types.UID
	ordinal    int
	podRunning bool
}

type podTrack struct {
	uid          types.UID
	key          topo.ShardKey
	cell         string
	runningSince time.Time
}

type shardTrack struct {
	eligibleSince time.Time
}

// New returns a Store configured by opts (zero fields take their defaults). The simulator runs once its
// controller is set up with a manager and the manager starts; the Store answers topology calls at once.
func New(opts Options) *Store {
	s := &Store{opts: opts.withDefaults(), spaces: map[string]*space{}}
	s.Sim = &SimReconciler{store: s}
	return s
}

func (s *Store) spaceLocked(ns string) *space {
	sp := s.spaces[ns]
	if sp == nil {
		sp = &space{
			cells: map[string]bool{}, databases: map[string]bool{}, poolers: map[string]*record{},
			pods: map[string]*podTrack{}, shards: map[topo.ShardKey]*shardTrack{}, queued: map[string]bool{},
			misreport: map[string]string{},
		}
		s.spaces[ns] = sp
	}
	return sp
}

func (s *Store) logLocked(e Entry) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	s.log = append(s.log, e)
}

func unavailableErr(ns string) error {
	return fmt.Errorf("%w (namespace %s)", topo.ErrUnavailable, ns)
}

// wait holds an operator call on namespace for the namespace's latency (SetLatency) and returns ctx's error
// when ctx ends first. It takes s.mu only to read the latency.
func (s *Store) wait(ctx context.Context, namespace string) error {
	s.mu.Lock()
	sp := s.spaceLocked(namespace)
	sp.calls = append(sp.calls, time.Now())
	d := sp.latency
	s.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// refusedLocked is the error an operator call on namespace answers with instead of running: waited (wait's
// error), else the Unavailable fault's; nil when the call runs. s.mu must be held.
func refusedLocked(sp *space, namespace string, waited error) error {
	if waited != nil {
		return waited
	}
	if sp.unavailable {
		return unavailableErr(namespace)
	}
	return nil
}

// RegisterCell records cell in namespace's topology (idempotent), after the namespace's latency. Returns an
// error wrapping topo.ErrUnavailable while the namespace is Unavailable, ctx's error when ctx ends during the
// latency.
func (s *Store) RegisterCell(ctx context.Context, namespace, cell string) error {
	waited := s.wait(ctx, namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spaceLocked(namespace)
	e := Entry{Namespace: namespace, Op: "register-cell", Detail: "cell=" + cell}
	if err := refusedLocked(sp, namespace, waited); err != nil {
		e.Err = err.Error()
		s.logLocked(e)
		return err
	}
	e.Changed = !sp.cells[cell]
	sp.cells[cell] = true
	s.logLocked(e)
	return nil
}

// RegisterDatabase records database in namespace's topology (idempotent), after the namespace's latency.
// Returns an error wrapping topo.ErrUnavailable while the namespace is Unavailable, ctx's error when ctx ends
// during the latency.
func (s *Store) RegisterDatabase(ctx context.Context, namespace, database string) error {
	waited := s.wait(ctx, namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spaceLocked(namespace)
	e := Entry{Namespace: namespace, Op: "register-database", Detail: "database=" + database}
	if err := refusedLocked(sp, namespace, waited); err != nil {
		e.Err = err.Error()
		s.logLocked(e)
		return err
	}
	e.Changed = !sp.databases[database]
	sp.databases[database] = true
	s.logLocked(e)
	return nil
}

// Poolers returns copies of the poolers of shard key in namespace (any lifecycle), sorted by Name; Role is the
// misreported one where Misreport is in force. Posture: Initialized and AcceptingConnections while the
// pooler's pod is seen Running and not terminating; CohortEligible always; InCommittedCohort while the shard
// has a SERVING PRIMARY. It answers after the namespace's latency. Returns an error wrapping
// topo.ErrUnavailable while the namespace is Unavailable, ctx's error when ctx ends during the latency.
func (s *Store) Poolers(ctx context.Context, namespace string, key topo.ShardKey) ([]topo.Pooler, error) {
	waited := s.wait(ctx, namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spaceLocked(namespace)
	if err := refusedLocked(sp, namespace, waited); err != nil {
		return nil, err
	}
	return s.poolersLocked(sp, key, true), nil
}

func (s *Store) poolersLocked(sp *space, key topo.ShardKey, misreport bool) []topo.Pooler {
	committed := primaryLocked(sp, key) != nil
	out := []topo.Pooler{}
	for _, r := range sp.poolers {
		if r.p.Key != key {
			continue
		}
		p := r.p
		if role, ok := sp.misreport[p.Name]; ok && misreport {
			p.Role = role
		}
		p.Initialized = r.podRunning
		p.AcceptingConnections = r.podRunning
		p.CohortEligible = true
		p.InCommittedCohort = committed
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func primaryLocked(sp *space, key topo.ShardKey) *record {
	for _, r := range sp.poolers {
		if r.p.Key == key && r.p.Role == topo.RolePrimary && r.p.Lifecycle == topo.LifecycleServing {
			return r
		}
	}
	return nil
}

// SetLifecycle sets the lifecycle of pooler (its Name) in namespace to "SERVING" or "SHUTDOWN" (the forms
// "LIFECYCLE_SERVING" and "LIFECYCLE_SHUTDOWN" are accepted too), after the namespace's latency. Errors:
// topo.ErrUnavailable (wrapped) while the namespace is Unavailable; ctx's error when ctx ends during the
// latency; ErrUnknownPooler (wrapped) for a name not in topology; a plain error for any other lifecycle.
// Shutting down a shard's primary lets multiorch elect another one.
func (s *Store) SetLifecycle(ctx context.Context, namespace, pooler, lifecycle string) error {
	waited := s.wait(ctx, namespace)
	s.mu.Lock()
	sp := s.spaceLocked(namespace)
	e := Entry{Namespace: namespace, Op: "set-lifecycle", Pooler: pooler}
	lc := strings.TrimPrefix(lifecycle, "LIFECYCLE_")
	err := refusedLocked(sp, namespace, waited)
	var r *record
	switch {
	case err != nil:
	case lc != topo.LifecycleServing && lc != topo.LifecycleShutdown:
		err = fmt.Errorf("pooler: invalid lifecycle %q", lifecycle)
	default:
		if r = sp.poolers[pooler]; r == nil {
			err = fmt.Errorf("%w %q in namespace %s", ErrUnknownPooler, pooler, namespace)
		}
	}
	if err != nil {
		e.Detail, e.Err = lifecycle, err.Error()
		s.logLocked(e)
		s.mu.Unlock()
		return err
	}
	e.Detail = r.p.Lifecycle + " -> " + lc
	e.Changed = r.p.Lifecycle != lc
	r.p.Lifecycle = lc
	s.logLocked(e)
	key := r.p.Key
	s.mu.Unlock()
	if e.Changed {
		s.Sim.trigger.Enqueue(shardRequest(namespace, key))
	}
	return nil
}

// Hold queues the pooler registrations of namespace that fall due from now on, until Release.
func (s *Store) Hold(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spaceLocked(namespace).held = true
	s.logLocked(Entry{Namespace: namespace, Op: "hold", Changed: true})
}

// Release ends Hold for namespace and registers every queued pooler at once (before Release returns), in pooler
// Name order; their roles are assigned by multiorch on the simulator's next pass over their shards. A queued
// pooler whose pod the simulator has since seen disappear is dropped.
func (s *Store) Release(namespace string) {
	s.mu.Lock()
	sp := s.spaceLocked(namespace)
	sp.held = false
	s.logLocked(Entry{Namespace: namespace, Op: "release", Changed: true, Detail: fmt.Sprintf("%d queued", len(sp.queued))})
	names := make([]string, 0, len(sp.queued))
	for n := range sp.queued {
		names = append(names, n)
	}
	sort.Strings(names)
	var reqs []reconcile.Request
	for _, n := range names {
		pod := strings.TrimPrefix(n, PoolerNamePrefix)
		if t := sp.pods[pod]; t != nil {
			s.registerLocked(namespace, sp, pod, t)
			reqs = append(reqs, shardRequest(namespace, t.key))
		}
	}
	sp.queued = map[string]bool{}
	s.mu.Unlock()
	s.Sim.trigger.Enqueue(reqs...)
}

// Held reports whether namespace is held.
func (s *Store) Held(namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spaceLocked(namespace).held
}

// Queued returns the sorted Names of the poolers of namespace waiting for Release.
func (s *Store) Queued(namespace string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.spaceLocked(namespace).queued {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// FreezeElections stops (on) or resumes (off) multiorch electing primaries in namespace. Poolers that
// register while a primary exists still join as REPLICA.
func (s *Store) FreezeElections(namespace string, on bool) {
	s.mu.Lock()
	sp := s.spaceLocked(namespace)
	sp.frozen = on
	s.logLocked(Entry{Namespace: namespace, Op: "freeze-elections", Detail: strconv.FormatBool(on), Changed: true})
	reqs := s.shardRequestsLocked(namespace, sp)
	s.mu.Unlock()
	if !on {
		s.Sim.trigger.Enqueue(reqs...)
	}
}

// Unavailable makes (on) every Store method for namespace fail with an error wrapping topo.ErrUnavailable, or
// ends that (off). The simulated poolers and multiorch keep working meanwhile.
func (s *Store) Unavailable(namespace string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spaceLocked(namespace).unavailable = on
	s.logLocked(Entry{Namespace: namespace, Op: "unavailable", Detail: strconv.FormatBool(on), Changed: true})
}

// SetLatency makes every operator call of namespace (RegisterCell, RegisterDatabase, Poolers, SetLifecycle)
// wait d before it runs, as a slow topology server answers; the wait ends early, with the call failing with
// ctx's error, when the caller's context ends. 0 (or less) ends it. The simulated poolers and multiorch, and
// the test's reads (Snapshot, Cells, Databases, Log), are not slowed.
func (s *Store) SetLatency(namespace string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spaceLocked(namespace).latency = max(d, 0)
	s.logLocked(Entry{Namespace: namespace, Op: "latency", Detail: max(d, 0).String(), Changed: true})
}

// Misreport makes Poolers report role for pooler (its Name) in namespace, whatever its real role, until
// ClearMisreport. The real role still drives elections and InCommittedCohort.
func (s *Store) Misreport(namespace, pooler, role string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spaceLocked(namespace).misreport[pooler] = role
	s.logLocked(Entry{Namespace: namespace, Op: "misreport", Pooler: pooler, Detail: "reports " + role, Changed: true})
}

// ClearMisreport ends a Misreport of pooler in namespace.
func (s *Store) ClearMisreport(namespace, pooler string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.spaceLocked(namespace).misreport, pooler)
	s.logLocked(Entry{Namespace: namespace, Op: "misreport", Pooler: pooler, Detail: "cleared", Changed: true})
}

// Snapshot returns the poolers of every shard of namespace with their real roles (no Misreport, no
// Unavailable fault), sorted by Name, with posture as in Poolers.
func (s *Store) Snapshot(namespace string) []topo.Pooler {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spaceLocked(namespace)
	keys := map[topo.ShardKey]bool{}
	for _, r := range sp.poolers {
		keys[r.p.Key] = true
	}
	var out []topo.Pooler
	for k := range keys {
		out = append(out, s.poolersLocked(sp, k, false)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Cells returns the sorted cells registered in namespace.
func (s *Store) Cells(namespace string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedKeys(s.spaceLocked(namespace).cells)
}

// Databases returns the sorted databases registered in namespace.
func (s *Store) Databases(namespace string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedKeys(s.spaceLocked(namespace).databases)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Log returns a copy of namespace's write log, oldest first.
func (s *Store) Log(namespace string) []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Entry{}
	for _, e := range s.log {
		if e.Namespace == namespace {
			out = append(out, e)
		}
	}
	return out
}

// CallTimes returns when each operator call on namespace (RegisterCell, RegisterDatabase, Poolers,
// SetLifecycle) began, in order, refused ones included: what an outage or a latency of the store could
// have met (suite.External.Calls).
func (s *Store) CallTimes(namespace string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.spaceLocked(namespace).calls)
}

// SetupWithManager registers the simulator's controller with mgr (Sim.Client defaults to mgr.GetClient()).
func (s *Store) SetupWithManager(mgr ctrl.Manager) error { return s.Sim.SetupWithManager(mgr) }

func (s *Store) shardRequestsLocked(ns string, sp *space) []reconcile.Request {
	seen := map[topo.ShardKey]bool{}
	var reqs []reconcile.Request
	add := func(k topo.ShardKey) {
		if !seen[k] {
			seen[k] = true
			reqs = append(reqs, shardRequest(ns, k))
		}
	}
	for _, t := range sp.pods {
		add(t.key)
	}
	for _, r := range sp.poolers {
		add(r.p.Key)
	}
	return reqs
}

// registerLocked registers (or re-registers) the pooler of pool pod podName. s.mu must be held.
func (s *Store) registerLocked(ns string, sp *space, podName string, t *podTrack) {
	name := PoolerNamePrefix + podName
	r := &record{
		p: topo.Pooler{Name: name, Cell: t.cell, Hostname: podName, Key: t.key,
			Lifecycle: topo.LifecycleServing},
		podUID:     t.uid,
		ordinal:    ordinal(podName),
		podRunning: true,
	}
	detail := fmt.Sprintf("cell=%s hostname=%s shard=%s", t.cell, podName, keyString(t.key))
	if old := sp.poolers[name]; old != nil {
		detail += " (re-registration)"
	}
	sp.poolers[name] = r
	delete(sp.queued, name)
	s.logLocked(Entry{Namespace: ns, Op: "register", Pooler: name, Detail: detail, Changed: true})
}

func ordinal(podName string) int {
	i := strings.LastIndexByte(podName, '-')
	if i < 0 {
		return int(^uint(0) >> 1)
	}
	n, err := strconv.Atoi(podName[i+1:])
	if err != nil {
		return int(^uint(0) >> 1)
	}
	return n
}

func keyString(k topo.ShardKey) string { return k.Database + "/" + k.TableGroup + "/" + k.Shard }

func shardRequest(ns string, k topo.ShardKey) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: keyString(k)}}
}

// SimReconciler is the simulator's controller, "pooler-sim". It reconciles one shard per request
// ({Namespace: ns, Name: "<database>/<tablegroup>/<shard>"}, the values of the pods' identity labels): it
// registers the poolers of the shard's pool pods (component shard-pool) RegistrationDelay after each runs (or
// queues them while the namespace is held), notes pods that stopped running or vanished, and plays multiorch:
// once a multiorch pod (component multiorch) of the shard is Ready and a SERVING pooler with a running pod is
// registered, and no SERVING PRIMARY exists, it waits ElectionDelay and elects the pooler with the lowest pod
// ordinal (then cell, then Name) PRIMARY; every other registered SERVING pooler of the shard with a running
// pod and no role gets REPLICA while multiorch is Ready and a primary exists. It writes nothing to Kubernetes.
// Create it with New (Store.Sim).
type SimReconciler struct {
	// Client reads pods (from the cache). Defaults to mgr.GetClient() at setup when nil.
	Client client.Client
	// managerClient is true when Client came from a manager in SetupWithManager.
	managerClient bool

	store   *Store
	trigger trigger.Source
}

// SetupWithManager registers the controller "pooler-sim" with mgr: it watches every Pod carrying
// the component label shard-pool or multiorch and the database, tablegroup and shard labels (mapped to its
// shard's request), plus the Store's own trigger (Release, FreezeElections off, SetLifecycle).
func (r *SimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// A client the manager handed out is taken again from each manager (a restarted manager's first one
	// refuses writes); one set by the caller is kept.
	if r.Client == nil || r.managerClient {
		r.Client, r.managerClient = mgr.GetClient(), true
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToShard)).
		WatchesRawSource(&r.trigger).
		Complete(r)
}

func podToShard(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if c := l[LabelComponent]; c != ComponentShardPool && c != ComponentMultiorch {
		return nil
	}
	k, ok := podKey(l)
	if !ok {
		return nil
	}
	return []reconcile.Request{shardRequest(o.GetNamespace(), k)}
}

func podKey(l map[string]string) (topo.ShardKey, bool) {
	k := topo.ShardKey{Database: l[LabelDatabase], TableGroup: l[LabelTableGroup], Shard: l[LabelShard]}
	return k, k.Database != "" && k.TableGroup != "" && k.Shard != ""
}

func parseShard(name string) (topo.ShardKey, bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 3 {
		return topo.ShardKey{}, false
	}
	return topo.ShardKey{Database: parts[0], TableGroup: parts[1], Shard: parts[2]}, true
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Reconcile runs one pass over a shard (see SimReconciler) and asks to be woken at its next due registration or
// election.
func (r *SimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key, ok := parseShard(req.Name)
	if !ok {
		return reconcile.Result{}, nil
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(req.Namespace), client.MatchingLabels{
		LabelDatabase: key.Database, LabelTableGroup: key.TableGroup, LabelShard: key.Shard,
	}); err != nil {
		return reconcile.Result{}, err
	}
	s := r.store
	now := time.Now()

	s.mu.Lock()
	wake := s.syncShardLocked(req.Namespace, key, pods.Items, now)
	s.mu.Unlock()

	if wake.IsZero() {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: max(wake.Sub(now), time.Millisecond)}, nil
}

// syncShardLocked brings the simulated topology of shard key in namespace ns in line with the shard's pods:
// it registers the poolers of pods that have run long enough, forgets pods that are gone and plays multiorch.
// It returns the earliest time a registration or election falls due (zero: none pending).
func (s *Store) syncShardLocked(ns string, key topo.ShardKey, pods []corev1.Pod, now time.Time) time.Time {
	var wake time.Time
	due := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	sp := s.spaceLocked(ns)
	orchReady := false
	present := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		switch p.Labels[LabelComponent] {
		case ComponentMultiorch:
			orchReady = orchReady || podReady(p)
			continue
		case ComponentShardPool:
		default:
			continue
		}
		present[p.Name] = true
		if at := s.syncPoolerPodLocked(ns, sp, key, p, now); !at.IsZero() {
			due(at)
		}
	}
	forgetGonePodsLocked(sp, key, present)
	if at := s.multiorchLocked(ns, sp, key, orchReady, now); !at.IsZero() {
		due(at)
	}
	return wake
}

// syncPoolerPodLocked tracks shard-pool pod p of shard key and registers its pooler once the pod has run for
// the registration delay (or queues it while registration is held). It returns when the registration falls
// due if the pod has not run long enough yet (zero otherwise).
func (s *Store) syncPoolerPodLocked(ns string, sp *space, key topo.ShardKey, p *corev1.Pod, now time.Time) time.Time {
	running := p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
	t := sp.pods[p.Name]
	if t == nil || t.uid != p.UID {
		t = &podTrack{uid: p.UID, key: key, cell: p.Labels[LabelCell]}
		sp.pods[p.Name] = t
	}
	if running && t.runningSince.IsZero() {
		t.runningSince = now
	}
	name := PoolerNamePrefix + p.Name
	rec := sp.poolers[name]
	if rec != nil && rec.podUID == p.UID {
		rec.podRunning = running
		return time.Time{}
	}
	if rec != nil {
		rec.podRunning = false // the pooler of an earlier pod under this name
	}
	if !running || sp.queued[name] {
		return time.Time{}
	}
	if at := t.runningSince.Add(s.opts.RegistrationDelay); now.Before(at) {
		return at
	}
	if sp.held {
		sp.queued[name] = true
		s.logLocked(Entry{Namespace: ns, Op: "queue", Pooler: name, Detail: "registration held", Changed: true})
		return time.Time{}
	}
	s.registerLocked(ns, sp, p.Name, t)
	return time.Time{}
}

// forgetGonePodsLocked drops the tracks of shard key's pods that are no longer present, with their queued
// registrations, and marks the poolers those pods ran as no longer running.
func forgetGonePodsLocked(sp *space, key topo.ShardKey, present map[string]bool) {
	for podName, t := range sp.pods {
		if t.key != key || present[podName] {
			continue
		}
		delete(sp.pods, podName)
		delete(sp.queued, PoolerNamePrefix+podName)
		if rec := sp.poolers[PoolerNamePrefix+podName]; rec != nil && rec.podUID == t.uid {
			rec.podRunning = false
		}
	}
}

// multiorchLocked plays multiorch for shard key; it returns when an election falls due (zero: none pending).
func (s *Store) multiorchLocked(ns string, sp *space, key topo.ShardKey, orchReady bool, now time.Time) time.Time {
	st := sp.shards[key]
	if st == nil {
		st = &shardTrack{}
		sp.shards[key] = st
	}
	if !orchReady {
		st.eligibleSince = time.Time{}
		return time.Time{}
	}
	var candidates []*record
	for _, r := range sp.poolers {
		if r.p.Key == key && r.p.Lifecycle == topo.LifecycleServing && r.podRunning {
			candidates = append(candidates, r)
		}
	}
	slices.SortFunc(candidates, func(a, b *record) int {
		if a.ordinal != b.ordinal {
			return a.ordinal - b.ordinal
		}
		if c := strings.Compare(a.p.Cell, b.p.Cell); c != 0 {
			return c
		}
		return strings.Compare(a.p.Name, b.p.Name)
	})
	primary := primaryLocked(sp, key)
	if primary == nil {
		if sp.frozen || len(candidates) == 0 {
			st.eligibleSince = time.Time{}
			return time.Time{}
		}
		if st.eligibleSince.IsZero() {
			st.eligibleSince = now
		}
		if at := st.eligibleSince.Add(s.opts.ElectionDelay); now.Before(at) {
			return at
		}
		st.eligibleSince = time.Time{}
		primary = candidates[0]
		old := primary.p.Role
		primary.p.Role = topo.RolePrimary
		s.logLocked(Entry{Namespace: ns, Op: "elect", Pooler: primary.p.Name, Changed: true,
			Detail: fmt.Sprintf("PRIMARY of %s (was %q)", keyString(key), old)})
	}
	for _, r := range candidates {
		if r != primary && r.p.Role == "" {
			r.p.Role = topo.RoleReplica
			s.logLocked(Entry{Namespace: ns, Op: "role", Pooler: r.p.Name, Changed: true,
				Detail: fmt.Sprintf("REPLICA of %s", keyString(key))})
		}
	}
	return time.Time{}
}
