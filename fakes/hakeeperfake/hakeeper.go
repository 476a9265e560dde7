// Package hakeeper is the MatrixOne HAKeeper fake: an implementation of the operator's hakeeper.Registry
// with one in-memory HAKeeper instance per LogSet, a simulator of the CN processes that register their
// stores and report their sessions, fault switches, a call log, and the migrator agent (Migrate) that moves
// a CNClaim to another pod as the external agent does in production.
//
// Wire it with New(opts).SetupWithManager(mgr) (the manager's scheme must hold core/v1 and the MatrixOne
// API types) and hand the *Registry to the operator's CN controllers as their HAKeeper. It imports the
// operator's hakeeper and API packages, never the harness.
//
// Instances: Registry.Instance creates the instance of a LogSet on first use when the LogSet's status says
// Ready (read through the simulator's client); EnsureInstance creates one explicitly. Stores are keyed by
// UUID (hakeeper.StoreUUID of the pod's namespace, name and spec.subdomain). A store is registered by its
// CN process (the "hakeeper-cn" controller) RegisterDelay after its pod runs and is removed only by
// DeleteCNStore. Sessions are set with SetSessions; while a store is Draining they drop by one every
// DrainTick until 0, and the store's work state becomes Drained then. Nothing here writes to Kubernetes
// except Migrate. Every method is safe for concurrent use.
package hakeeperfake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	hk "github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
)

// Operations, as logged and as named in the fault switches. The first six are the operator's calls.
const (
	OpGetClusterDetails = "GetClusterDetails"
	OpPatchCNStore      = "PatchCNStore"
	OpUpdateCNLabel     = "UpdateCNLabel"
	OpUpdateCNWorkState = "UpdateCNWorkState"
	OpDeleteCNStore     = "DeleteCNStore"
	OpGetCNState        = "GetCNState"
	// OpRegister is a CN process registering its store (result "registered", "exists" or "dropped").
	OpRegister = "Register"
	// OpExpire is HAKeeper dropping a store whose process stopped heartbeating after it registered the
	// store again, once the operator had deleted it (result "expired"; see CNSimReconciler).
	OpExpire = "Expire"
	// OpInstance is the creation of a LogSet's instance.
	OpInstance = "Instance"
	// OpSetSessions is a test setting a store's session count.
	OpSetSessions = "SetSessions"
	// OpMigrate is the migrator agent moving a claim (Registry.Migrate).
	OpMigrate = "Migrate"
	// OpFault is a fault switch (FailNext, FailAlways, SetLatency, DropRegistrations, FreezeCache,
	// Unavailable).
	OpFault = "Fault"
)

// ErrUnavailable is returned (wrapped, with the namespace; test with errors.Is) by every operator call of a
// namespace's instances while Unavailable is on, as a HAKeeper that cannot be reached fails them.
var ErrUnavailable = errors.New("hakeeper unavailable")

// Options configures the fake. A zero field takes its default; the defaults are test-speed (the real
// operator's time scaled by 0.01, like the other fakes).
type Options struct {
	// RegisterDelay is the time from the simulator first seeing a CN pod Running to its store registering.
	// Default 20ms.
	RegisterDelay time.Duration
	// DrainTick is the period at which a Draining store's sessions drop by one. Default 10ms (1 s real).
	DrainTick time.Duration
	// Heartbeat is the retry period of a CN process that could not register (dropped registration, LogSet
	// without an instance, pool not found). Default 50ms.
	Heartbeat time.Duration
	// Now is the clock of the drain model and the log; nil means time.Now.
	Now func() time.Time
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options { return Options{}.withDefaults() }

func (o Options) withDefaults() Options {
	if o.RegisterDelay <= 0 {
		o.RegisterDelay = 20 * time.Millisecond
	}
	if o.DrainTick <= 0 {
		o.DrainTick = 10 * time.Millisecond
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 50 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Call is one logged call: an operator call on an instance, a CN registration, a test's setting or a fault
// switch.
type Call struct {
	// Time is when the call returned.
	Time time.Time
	// Namespace and LogSet locate the instance ("" LogSet for namespace-wide switches).
	Namespace, LogSet string
	// Op is one of the Op* constants.
	Op string
	// UUID is the store concerned, else "".
	UUID string
	// Args describes the arguments (e.g. "state=Working labels=[role:a]").
	Args string
	// Result describes the outcome (e.g. "2 stores", "Working sessions=3", "dropped"); "" for an error.
	Result string
	// Err is the error text returned to the caller, else "".
	Err string
}

// Registry is the fake HAKeeper: an hk.Registry handing out one Instance per LogSet, the CN process
// simulator (Sim) and the fault switches. Create it with New.
type Registry struct {
	// Sim is the "hakeeper-cn" controller (CN processes). Set Sim.Client before setup to wire a client of
	// your own.
	Sim *CNSimReconciler

	opts Options

	mu     sync.Mutex
	spaces map[string]*space
	log    []Call
	reader client.Reader
	// callTimes are, by namespace, when each operator call began, in order (CallTimes).
	callTimes map[string][]time.Time
}

var _ hk.Registry = (*Registry)(nil)

type space struct {
	instances map[string]*Instance
	failNext  map[string][]error
	failAll   map[string]error
	latency   map[string]time.Duration
	drop      bool
	frozen    bool
	down      bool
}

// store is one CN store; sessions is the count at since (the drain model's base).
type store struct {
	s     hk.CNStore
	since time.Time
	// again is set for a store its process registered again after the operator deleted it.
	again bool
}

// Instance is one LogSet's HAKeeper: the hk.Client the operator calls. Obtain it from Registry.Instance or
// EnsureInstance.
type Instance struct {
	reg               *Registry
	namespace, logSet string
	discovery         string
	stores            map[string]*store // guarded by reg.mu
	// deleted holds the uuids DeleteCNStore removed (guarded by reg.mu): a later registration of one is a
	// registration again.
	deleted map[string]bool
	frozen  *hk.ClusterDetails
}

var _ hk.Client = (*Instance)(nil)

// New returns a Registry configured by opts (zero fields take their defaults). The simulator runs once set
// up with a manager and started; the Registry answers calls at once.
func New(opts Options) *Registry {
	r := &Registry{opts: opts.withDefaults(), spaces: map[string]*space{}, callTimes: map[string][]time.Time{}}
	r.Sim = &CNSimReconciler{reg: r, seen: map[types.NamespacedName]time.Time{}}
	return r
}

// Options returns the options in force (defaults filled in).
func (r *Registry) Options() Options { return r.opts }

func (r *Registry) spaceLocked(ns string) *space {
	sp := r.spaces[ns]
	if sp == nil {
		sp = &space{instances: map[string]*Instance{}, failNext: map[string][]error{},
			failAll: map[string]error{}, latency: map[string]time.Duration{}}
		r.spaces[ns] = sp
	}
	return sp
}

func (r *Registry) logLocked(c Call) {
	if c.Time.IsZero() {
		c.Time = r.opts.Now()
	}
	r.log = append(r.log, c)
}

func (r *Registry) setReader(c client.Reader) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reader = c
}

// Instance implements hk.Registry: the instance of LogSet namespace/logSet. An instance that does not exist
// yet is created when the LogSet exists and its status says Ready (read through the simulator's client, so
// only after setup); otherwise hk.ErrNoInstance.
func (r *Registry) Instance(ctx context.Context, namespace, logSet string) (hk.Client, error) {
	r.mu.Lock()
	if in := r.spaceLocked(namespace).instances[logSet]; in != nil {
		r.mu.Unlock()
		return in, nil
	}
	rd := r.reader
	r.mu.Unlock()
	if rd == nil || logSet == "" {
		return nil, hk.ErrNoInstance
	}
	ls := &mov1.LogSet{}
	if err := rd.Get(ctx, types.NamespacedName{Namespace: namespace, Name: logSet}, ls); err != nil {
		return nil, hk.ErrNoInstance
	}
	if !ls.Status.IsReady() {
		return nil, hk.ErrNoInstance
	}
	return r.ensure(namespace, logSet, ls.Status.Discovery), nil
}

// EnsureInstance returns the instance of LogSet namespace/logSet, creating it (whatever the LogSet's state)
// when missing.
func (r *Registry) EnsureInstance(namespace, logSet string) *Instance {
	return r.ensure(namespace, logSet, namespace+"/"+logSet)
}

func (r *Registry) ensure(namespace, logSet, discovery string) *Instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.spaceLocked(namespace)
	if in := sp.instances[logSet]; in != nil {
		return in
	}
	in := &Instance{reg: r, namespace: namespace, logSet: logSet, discovery: discovery, stores: map[string]*store{}, deleted: map[string]bool{}}
	if sp.frozen {
		d := in.detailsLocked(r.opts.Now())
		in.frozen = &d
	}
	sp.instances[logSet] = in
	r.logLocked(Call{Namespace: namespace, LogSet: logSet, Op: OpInstance, Args: "discovery=" + discovery, Result: "created"})
	return in
}

// HasInstance reports whether LogSet namespace/logSet has an instance.
func (r *Registry) HasInstance(namespace, logSet string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spaceLocked(namespace).instances[logSet] != nil
}

// ---------------------------------------------------------------------------------------------------------
// Faults

// FailNext makes the next call of op (an Op* constant of the operator's calls, or OpRegister) on any
// instance of namespace fail with err; calling it n times queues n failures, used in order.
func (r *Registry) FailNext(namespace, op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.spaceLocked(namespace)
	sp.failNext[op] = append(sp.failNext[op], err)
	r.logLocked(Call{Namespace: namespace, Op: OpFault, Args: "fail-next " + op, Result: errText(err)})
}

// FailAlways makes every call of op in namespace fail with err (after the queued FailNext errors); a nil
// err ends it.
func (r *Registry) FailAlways(namespace, op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.spaceLocked(namespace)
	if err == nil {
		delete(sp.failAll, op)
	} else {
		sp.failAll[op] = err
	}
	r.logLocked(Call{Namespace: namespace, Op: OpFault, Args: "fail-always " + op, Result: errText(err)})
}

// SetLatency delays every call of op ("" = every operator call) in namespace by d before it runs (the wait
// ends early, with ctx's error, when the caller's context ends); 0 removes the delay.
func (r *Registry) SetLatency(namespace, op string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.spaceLocked(namespace)
	if d <= 0 {
		delete(sp.latency, op)
	} else {
		sp.latency[op] = d
	}
	r.logLocked(Call{Namespace: namespace, Op: OpFault, Args: fmt.Sprintf("latency %q", op), Result: d.String()})
}

// DropRegistrations, while on, drops every CN registration of namespace (logged with result "dropped");
// the CN processes retry every Heartbeat and get in once it is off.
func (r *Registry) DropRegistrations(namespace string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spaceLocked(namespace).drop = on
	r.logLocked(Call{Namespace: namespace, Op: OpFault, Args: "drop-registrations", Result: fmt.Sprint(on)})
}

// FreezeCache, while on, makes GetClusterDetails of every instance of namespace (existing or created
// meanwhile) return the snapshot taken when it was frozen; the other calls see the live stores.
func (r *Registry) FreezeCache(namespace string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.spaceLocked(namespace)
	sp.frozen = on
	now := r.opts.Now()
	for _, in := range sp.instances {
		in.frozen = nil
		if on {
			d := in.detailsLocked(now)
			in.frozen = &d
		}
	}
	r.logLocked(Call{Namespace: namespace, Op: OpFault, Args: "freeze-cache", Result: fmt.Sprint(on)})
}

// Unavailable, while on, fails every operator call of every instance of namespace (existing or created
// meanwhile) with an error wrapping ErrUnavailable, after any latency, without using up a queued FailNext,
// and drops every CN registration of namespace (logged with result "dropped"; the CN processes retry every
// Heartbeat and get in once it is off). Registry.Instance still hands out instances: it only looks the
// LogSet's up. Off ends it; FailAlways, SetLatency and DropRegistrations are independent of it.
func (r *Registry) Unavailable(namespace string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spaceLocked(namespace).down = on
	r.logLocked(Call{Namespace: namespace, Op: OpFault, Args: "unavailable", Result: fmt.Sprint(on)})
}

// fault returns the latency and the injected error (Unavailable's, else a FailNext it consumes, else
// FailAlways's) of one call of op.
func (r *Registry) fault(namespace, op string) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.spaceLocked(namespace)
	lat := sp.latency[op] + sp.latency[""]
	if sp.down {
		return lat, fmt.Errorf("%w (namespace %s)", ErrUnavailable, namespace)
	}
	if q := sp.failNext[op]; len(q) > 0 {
		sp.failNext[op] = q[1:]
		return lat, q[0]
	}
	return lat, sp.failAll[op]
}

// ---------------------------------------------------------------------------------------------------------
// Queries and test settings

// Log returns a copy of namespace's call log, oldest first.
func (r *Registry) Log(namespace string) []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []Call{}
	for _, c := range r.log {
		if c.Namespace == namespace {
			out = append(out, c)
		}
	}
	return out
}

// Calls counts namespace's logged calls per Op.
func (r *Registry) Calls(namespace string) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, c := range r.log {
		if c.Namespace == namespace {
			out[c.Op]++
		}
	}
	return out
}

// Stores returns the stores of every instance of namespace, as GetCNState would, sorted by UUID.
func (r *Registry) Stores(namespace string) []hk.CNStore {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.opts.Now()
	var out []hk.CNStore
	for _, in := range r.spaceLocked(namespace).instances {
		for _, st := range in.stores {
			out = append(out, r.settle(st, now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UUID < out[j].UUID })
	return out
}

// Store returns the store uuid of namespace (any instance).
func (r *Registry) Store(namespace, uuid string) (hk.CNStore, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, _ := r.findLocked(namespace, uuid); st != nil {
		return r.settle(st, r.opts.Now()), true
	}
	return hk.CNStore{}, false
}

// PodStore returns the store registered for pod namespace/pod (any instance).
func (r *Registry) PodStore(namespace, pod string) (hk.CNStore, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.opts.Now()
	for _, in := range r.spaceLocked(namespace).instances {
		for _, st := range in.stores {
			if st.s.PodName == pod {
				return r.settle(st, now), true
			}
		}
	}
	return hk.CNStore{}, false
}

// SetSessions sets the open sessions of store uuid of namespace (a Draining store drains from n on).
// Errors: hk.ErrStoreNotExist (wrapped) for an unknown store.
func (r *Registry) SetSessions(namespace, uuid string, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, in := r.findLocked(namespace, uuid)
	c := Call{Namespace: namespace, Op: OpSetSessions, UUID: uuid, Args: fmt.Sprintf("sessions=%d", n)}
	if st == nil {
		err := fmt.Errorf("store %s: %w", uuid, hk.ErrStoreNotExist)
		c.Err = err.Error()
		r.logLocked(c)
		return err
	}
	c.LogSet = in.logSet
	now := r.opts.Now()
	r.settle(st, now)
	st.s.Sessions, st.since = max(n, 0), now
	if st.s.WorkState == hk.WorkStateDrained && n > 0 {
		st.s.WorkState = hk.WorkStateDraining
	}
	c.Result = "ok"
	r.logLocked(c)
	return nil
}

// Sessions returns the open sessions of store uuid of namespace. Errors: hk.ErrStoreNotExist (wrapped).
func (r *Registry) Sessions(namespace, uuid string) (int, error) {
	st, ok := r.Store(namespace, uuid)
	if !ok {
		return 0, fmt.Errorf("store %s: %w", uuid, hk.ErrStoreNotExist)
	}
	return st.Sessions, nil
}

// Register registers a store for pod in LogSet namespace/logSet's instance (creating the instance when
// missing), as the CN process of the pod does: work state Working, no labels, no sessions. An existing
// store is left as it is. It is dropped (returns false) while DropRegistrations or Unavailable is on or when
// a FailNext / FailAlways of OpRegister applies.
func (r *Registry) Register(namespace, logSet, pod, uuid string) bool {
	in := r.EnsureInstance(namespace, logSet)
	_, ferr := r.fault(namespace, OpRegister)
	r.mu.Lock()
	defer r.mu.Unlock()
	c := Call{Namespace: namespace, LogSet: logSet, Op: OpRegister, UUID: uuid, Args: "pod=" + pod}
	switch {
	case r.spaceLocked(namespace).drop || ferr != nil:
		c.Result = "dropped"
		r.logLocked(c)
		return false
	case in.stores[uuid] != nil:
		c.Result = "exists"
	default:
		in.stores[uuid] = &store{s: hk.CNStore{UUID: uuid, Namespace: namespace, PodName: pod,
			WorkState: hk.WorkStateWorking}, since: r.opts.Now(), again: in.deleted[uuid]}
		delete(in.deleted, uuid)
		c.Result = "registered"
	}
	r.logLocked(c)
	return true
}

// expire drops the store of pod namespace/pod when its process registered it again after the operator had
// deleted it: that process has stopped (the pod is gone or being deleted), and HAKeeper drops a store whose
// heartbeats stop. A store registered once is left to the operator's DeleteCNStore, so an operator that never
// deletes a store is still seen leaving it behind.
func (r *Registry) expire(namespace, pod string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range r.spaceLocked(namespace).instances {
		for uuid, st := range in.stores {
			if st.s.PodName == pod && st.again {
				delete(in.stores, uuid)
				r.logLocked(Call{Namespace: namespace, LogSet: in.logSet, Op: OpExpire, UUID: uuid, Args: "pod=" + pod, Result: "expired"})
			}
		}
	}
}

func (r *Registry) findLocked(namespace, uuid string) (*store, *Instance) {
	for _, in := range r.spaceLocked(namespace).instances {
		if st := in.stores[uuid]; st != nil {
			return st, in
		}
	}
	return nil, nil
}

// settle advances the drain model of st to now and returns a copy of the store.
func (r *Registry) settle(st *store, now time.Time) hk.CNStore {
	if st.s.WorkState == hk.WorkStateDraining && st.s.Sessions > 0 {
		ticks := int(now.Sub(st.since) / r.opts.DrainTick)
		if ticks > 0 {
			drop := min(ticks, st.s.Sessions)
			st.s.Sessions -= drop
			st.since = st.since.Add(time.Duration(drop) * r.opts.DrainTick)
		}
	}
	if st.s.WorkState == hk.WorkStateDraining && st.s.Sessions == 0 {
		st.s.WorkState = hk.WorkStateDrained
	}
	out := st.s
	out.Labels = cloneLabels(st.s.Labels)
	return out
}

// ---------------------------------------------------------------------------------------------------------
// Instance: the operator's calls

// Namespace returns the instance's namespace.
func (in *Instance) Namespace() string { return in.namespace }

// LogSet returns the name of the instance's LogSet.
func (in *Instance) LogSet() string { return in.logSet }

// Discovery returns the instance's discovery address (the LogSet's status.discovery, or
// "<namespace>/<logSet>" for an instance made by EnsureInstance).
func (in *Instance) Discovery() string { return in.discovery }

// CallTimes returns when each operator call of namespace's HAKeeper (every hk.Client call) began, in order,
// refused ones included: what an outage or a latency of HAKeeper could have met (suite.External.Calls).
func (r *Registry) CallTimes(namespace string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.callTimes[namespace])
}

// call runs one operator call: latency, injected error, then fn under the registry lock; logs it.
func (in *Instance) call(ctx context.Context, op, uuid, args string, fn func(now time.Time) (string, error)) error {
	r := in.reg
	r.mu.Lock()
	r.callTimes[in.namespace] = append(r.callTimes[in.namespace], time.Now())
	r.mu.Unlock()
	lat, err := r.fault(in.namespace, op)
	if lat > 0 {
		t := time.NewTimer(lat)
		select {
		case <-ctx.Done():
			t.Stop()
			if err == nil {
				err = ctx.Err()
			}
		case <-t.C:
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := ""
	if err == nil {
		res, err = fn(r.opts.Now())
	}
	r.logLocked(Call{Namespace: in.namespace, LogSet: in.logSet, Op: op, UUID: uuid, Args: args,
		Result: res, Err: errText(err)})
	return err
}

func (in *Instance) detailsLocked(now time.Time) hk.ClusterDetails {
	d := hk.ClusterDetails{}
	for _, st := range in.stores {
		d.CNStores = append(d.CNStores, in.reg.settle(st, now))
	}
	sort.Slice(d.CNStores, func(i, j int) bool { return d.CNStores[i].UUID < d.CNStores[j].UUID })
	return d
}

func (in *Instance) storeLocked(uuid string) (*store, error) {
	st := in.stores[uuid]
	if st == nil {
		return nil, fmt.Errorf("store %s: %w", uuid, hk.ErrStoreNotExist)
	}
	return st, nil
}

// GetClusterDetails returns every store (the frozen snapshot while FreezeCache is on).
func (in *Instance) GetClusterDetails(ctx context.Context) (hk.ClusterDetails, error) {
	var out hk.ClusterDetails
	err := in.call(ctx, OpGetClusterDetails, "", "", func(now time.Time) (string, error) {
		if in.frozen != nil {
			out = cloneDetails(*in.frozen)
			return fmt.Sprintf("%d stores (frozen)", len(out.CNStores)), nil
		}
		out = in.detailsLocked(now)
		return fmt.Sprintf("%d stores", len(out.CNStores)), nil
	})
	return out, err
}

// PatchCNStore sets the store's work state and, when labels is not empty, its labels. Entering Draining
// starts the drain model.
func (in *Instance) PatchCNStore(ctx context.Context, uuid string, state hk.WorkState, labels []hk.Label) error {
	return in.call(ctx, OpPatchCNStore, uuid, fmt.Sprintf("state=%s labels=%s", state, labelText(labels)),
		func(now time.Time) (string, error) {
			st, err := in.storeLocked(uuid)
			if err != nil {
				return "", err
			}
			in.setState(st, state, now)
			if len(labels) > 0 {
				st.s.Labels = sortedLabels(labels)
			}
			return string(st.s.WorkState), nil
		})
}

// UpdateCNLabel replaces the store's labels (nil clears them).
func (in *Instance) UpdateCNLabel(ctx context.Context, uuid string, labels []hk.Label) error {
	return in.call(ctx, OpUpdateCNLabel, uuid, "labels="+labelText(labels), func(time.Time) (string, error) {
		st, err := in.storeLocked(uuid)
		if err != nil {
			return "", err
		}
		st.s.Labels = sortedLabels(labels)
		return "ok", nil
	})
}

// UpdateCNWorkState sets the store's work state.
func (in *Instance) UpdateCNWorkState(ctx context.Context, uuid string, state hk.WorkState) error {
	return in.call(ctx, OpUpdateCNWorkState, uuid, "state="+string(state), func(now time.Time) (string, error) {
		st, err := in.storeLocked(uuid)
		if err != nil {
			return "", err
		}
		in.setState(st, state, now)
		return string(st.s.WorkState), nil
	})
}

// DeleteCNStore removes the store.
func (in *Instance) DeleteCNStore(ctx context.Context, uuid string) error {
	return in.call(ctx, OpDeleteCNStore, uuid, "", func(time.Time) (string, error) {
		if _, err := in.storeLocked(uuid); err != nil {
			return "", err
		}
		delete(in.stores, uuid)
		in.deleted[uuid] = true
		return "deleted", nil
	})
}

// GetCNState returns the store (hk.ErrStoreNotExist, wrapped, for an unknown one).
func (in *Instance) GetCNState(ctx context.Context, uuid string) (hk.CNStore, error) {
	var out hk.CNStore
	err := in.call(ctx, OpGetCNState, uuid, "", func(now time.Time) (string, error) {
		st, err := in.storeLocked(uuid)
		if err != nil {
			return "", err
		}
		out = in.reg.settle(st, now)
		return fmt.Sprintf("%s sessions=%d", out.WorkState, out.Sessions), nil
	})
	return out, err
}

// setState moves a store to state, starting the drain model on entering Draining.
func (in *Instance) setState(st *store, state hk.WorkState, now time.Time) {
	in.reg.settle(st, now)
	draining := st.s.WorkState == hk.WorkStateDraining || st.s.WorkState == hk.WorkStateDrained
	st.s.WorkState = state
	if state == hk.WorkStateDraining {
		if !draining {
			st.since = now
		}
		in.reg.settle(st, now)
	}
}

// ---------------------------------------------------------------------------------------------------------
// helpers

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func cloneLabels(in []hk.Label) []hk.Label {
	if in == nil {
		return nil
	}
	out := make([]hk.Label, len(in))
	for i, l := range in {
		out[i] = hk.Label{Key: l.Key, Values: slices.Clone(l.Values)}
	}
	return out
}

func sortedLabels(in []hk.Label) []hk.Label {
	out := cloneLabels(in)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if len(out) == 0 {
		return nil
	}
	return out
}

func cloneDetails(d hk.ClusterDetails) hk.ClusterDetails {
	out := hk.ClusterDetails{}
	for _, s := range d.CNStores {
		s.Labels = cloneLabels(s.Labels)
		out.CNStores = append(out.CNStores, s)
	}
	return out
}

func labelText(ls []hk.Label) string {
	parts := make([]string, 0, len(ls))
	for _, l := range ls {
		parts = append(parts, l.Key+":"+strings.Join(l.Values, ","))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Errors of the migrator agent (Migrate, MigrationTarget).
var (
	// ErrNotBound is returned by Migrate for a claim with no spec.podName.
	ErrNotBound = errors.New("claim is not bound")
	// ErrMigrating is returned by Migrate for a claim whose previous migration has not finished
	// (spec.sourcePod set).
	ErrMigrating = errors.New("claim is already migrating")
	// ErrNoTarget is returned by Migrate when no pod of the claim's pool qualifies as a target.
	ErrNoTarget = errors.New("no migration target")
)
