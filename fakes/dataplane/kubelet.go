package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ensembletest/ensemble/fakes/internal/trigger"
)

// kubelet is the kubelet stand-in, controller "dataplane-kubelet". At setup it registers one Node
// (Options.NodeName, created when absent: Ready, InternalIP NodeInternalIP, pod CIDR PodCIDR) and starts
// renewing its Lease. It reconciles every Pod in every namespace and writes the pod's status by server-side
// apply with its own field owner, owning only phase, podIP(s), hostIP(s), startTime, containerStatuses and the
// conditions PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady and Ready (so
// readiness-gate conditions written by an operator keep their own owner). A pod's life:
//   - created without spec.nodeName: bound to the node through pods/binding (a pod with scheduling gates waits
//     for them to go); a pod created with a nodeName, any, is run as it is;
//   - left Pending (the API server's default) for StartDelay from the kubelet's first sight of it;
//   - Running: a pod IP from PodCIDR (unique among existing pods, kept for the pod's life), hostIP
//     NodeInternalIP, containers started, not ready; after ReadyDelay containers ready;
//   - Ready = ContainersReady and every spec.readinessGates condition True, recomputed on every pod change;
//   - a RestartAnnotations value change on a running pod: in-place restart (see Options);
//   - CrashLoop on: containers waiting in CrashLoopBackOff, restartCount rising; off: start again;
//   - run to completion (pods owned by a batch Job, or annotated AnnotationRunFor): Options.RunFor (or the
//     annotation) after their start the containers exit with code 0 or AnnotationExitCode. Unless
//     spec.restartPolicy restarts them (Always; OnFailure after a non-zero code), the pod is terminal:
//     Succeeded (code 0) or Failed, not ready, connections dropped, and nothing restarts it. A restart is
//     immediate the first time, then waits in CrashLoopBackOff (CrashLoopBackoff doubling up to
//     CrashLoopMaxBackoff), restartCount + 1 per restart;
//   - deletionTimestamp set: containers terminated (exit 0, unless they had exited already), not ready,
//     phase Succeeded, connections dropped; then, once the pod has a nodeName and no finalizer, the kubelet
//     deletes it with grace period 0 (a pod kept by a finalizer stays, terminated, until the finalizer goes).
//     A terminating pod without nodeName is the API server's to remove.
//
// Init containers get no status. New creates it, as DataPlane's kubelet; the zero value is not usable.
type kubelet struct {
	// Client reads Pods and applies their status. Defaults to mgr.GetClient() at setup when nil.
	Client client.Client
	// managerClient is true when Client came from a manager in SetupWithManager.
	managerClient bool
	// version is the kubelet version the Node reports: Options.KubeletVersion, else the API server's.
	version string

	opts    Options
	log     *writeLog
	trigger trigger.Source

	mu      sync.Mutex
	pods    map[types.NamespacedName]*podState
	crash   map[types.NamespacedName]bool
	conns   map[types.NamespacedName]map[uint64]struct{}
	dropped map[types.NamespacedName]int
	nextID  uint64
	ips     *ipPool
}

type termination struct {
	exitCode   int32
	reason     string
	startedAt  time.Time
	finishedAt time.Time
}

type podState struct {
	uid         types.UID
	firstSeen   time.Time
	ip          string
	ipOffset    uint32 // in k.ips, released when the pod goes
	bound       bool   // binding created (the cache may not show spec.nodeName yet)
	removed     bool   // deleted with grace period 0 (the cache may not show it gone yet)
	running     bool
	startedAt   time.Time
	readyAt     time.Time
	restarts    int32
	annotations map[string]string
	crashing    bool
	nextCrash   time.Time
	backoff     time.Duration
	lastTerm    *termination
	terminated  bool
	terminateAt time.Time
	// Run to completion: exited is set when the containers exited for good (the pod is terminal); restartAt,
	// when not zero, is when containers that exited are started again; exitRestarts counts those restarts
	// (it drives their back-off).
	exited       *termination
	restartAt    time.Time
	exitRestarts int
}

func newKubelet(opts Options, l *writeLog) *kubelet {
	return &kubelet{
		opts:    opts,
		log:     l,
		pods:    map[types.NamespacedName]*podState{},
		crash:   map[types.NamespacedName]bool{},
		conns:   map[types.NamespacedName]map[uint64]struct{}{},
		dropped: map[types.NamespacedName]int{},
		ips:     newIPPool(),
	}
}

// SetupWithManager creates the kubelet's Node when absent (an API call, made at once: the API server must be
// up), adds the node Lease heartbeat to mgr (unless Options.NodeLeaseRenewInterval is negative) and
// registers the controller "dataplane-kubelet" with mgr: it watches every Pod and the kubelet's own trigger
// (CrashLoop).
func (k *kubelet) SetupWithManager(mgr ctrl.Manager) error {
	// A client the manager handed out is taken again from each manager (a restarted manager's first one
	// refuses writes); one set by the caller is kept.
	if k.Client == nil || k.managerClient {
		k.Client, k.managerClient = mgr.GetClient(), true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if k.version = k.opts.KubeletVersion; k.version == "" {
		dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("read the API server's version for node %s: %w", k.opts.NodeName, err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			return fmt.Errorf("read the API server's version for node %s (set Options.KubeletVersion to skip it): %w", k.opts.NodeName, err)
		}
		k.version = v.GitVersion
	}
	if err := k.ensureNode(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", k.opts.NodeName, err)
	}
	if k.opts.NodeLeaseRenewInterval > 0 {
		if err := mgr.Add(heartbeat{k}); err != nil {
			return err
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(KubeletControllerName).
		For(&corev1.Pod{}).
		WatchesRawSource(&k.trigger).
		Complete(k)
}

// RestartCount returns the restart count of the pod namespace/name's current incarnation (0 if unseen or gone).
func (k *kubelet) RestartCount(namespace, pod string) int32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if st := k.pods[key(namespace, pod)]; st != nil {
		return st.restarts
	}
	return 0
}

// OpenConnection registers a client connection held by the pod and returns the func that closes it normally; see DataPlane.OpenConnection.
func (k *kubelet) OpenConnection(namespace, pod string) (closeConn func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kk := key(namespace, pod)
	k.nextID++
	id := k.nextID
	if k.conns[kk] == nil {
		k.conns[kk] = map[uint64]struct{}{}
	}
	k.conns[kk][id] = struct{}{}
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		delete(k.conns[kk], id)
	}
}

// Connections counts the open connections of the pod; see DataPlane.Connections.
func (k *kubelet) Connections(namespace, pod string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.conns[key(namespace, pod)])
}

// Dropped counts the connections of the pod dropped by restarts or termination; see DataPlane.Dropped.
func (k *kubelet) Dropped(namespace, pod string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dropped[key(namespace, pod)]
}

// CrashLoop turns crash-loop injection on or off for the pod; see DataPlane.CrashLoop.
func (k *kubelet) CrashLoop(namespace, pod string, on bool) {
	kk := key(namespace, pod)
	k.mu.Lock()
	if on {
		k.crash[kk] = true
	} else {
		delete(k.crash, kk)
	}
	k.mu.Unlock()
	k.trigger.Enqueue(reconcile.Request{NamespacedName: kk})
}

// forgetLocked forgets the pod kk: its state, its IP and its connections (dropped). k.mu must be held.
func (k *kubelet) forgetLocked(kk types.NamespacedName) {
	if st := k.pods[kk]; st != nil {
		k.ips.release(st.ipOffset)
	}
	delete(k.pods, kk)
	k.dropLocked(kk)
}

// bindOrForget binds pod; on a failure it clears st.bound so that a later pass binds again, but for
// Conflict (the pod was bound or is being deleted meanwhile) and NotFound, whose own event comes.
func (k *kubelet) bindOrForget(ctx context.Context, pod *corev1.Pod, st *podState) error {
	err := k.bind(ctx, pod)
	// A refused binding is retried, as the scheduler retries one (a conflict included: only this fake binds,
	// and a pod bound meanwhile shows its nodeName on the retry's read). A pod that is gone needs none.
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	k.unmark(client.ObjectKeyFromObject(pod), st, func(st *podState) { st.bound = false })
	return err
}

// unmark applies undo to st if st is still the state of kk.
func (k *kubelet) unmark(kk types.NamespacedName, st *podState, undo func(*podState)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pods[kk] == st {
		undo(st)
	}
}

// dropLocked drops every connection held to kk. k.mu must be held.
func (k *kubelet) dropLocked(kk types.NamespacedName) {
	if n := len(k.conns[kk]); n > 0 {
		k.dropped[kk] += n
		delete(k.conns, kk)
	}
}

// Reconcile advances one pod's simulated life to now: it binds an unscheduled pod, applies the status that
// results when it differs from the pod's, and deletes a terminating pod that is done. It asks to be woken at
// the pod's next timed step.
func (k *kubelet) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := k.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			k.mu.Lock()
			k.forgetLocked(req.NamespacedName)
			k.mu.Unlock()
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	now := time.Now()
	k.mu.Lock()
	st := k.pods[req.NamespacedName]
	if st == nil || st.uid != pod.UID {
		if st != nil {
			k.forgetLocked(req.NamespacedName) // an earlier incarnation vanished between two events
		}
		st = &podState{uid: pod.UID, firstSeen: now}
		st.ipOffset, st.ip = k.ips.allocate()
		k.pods[req.NamespacedName] = st
	}
	if pod.DeletionTimestamp == nil && pod.Spec.NodeName == "" {
		bind := !st.bound && len(pod.Spec.SchedulingGates) == 0
		if bind {
			st.bound, st.firstSeen = true, now // StartDelay counts from the binding
		}
		k.mu.Unlock()
		if !bind {
			return reconcile.Result{}, nil // bound, or gated: the pod's next change wakes the kubelet
		}
		return reconcile.Result{}, k.bindOrForget(ctx, pod, st)
	}
	desired, wake := k.advanceLocked(req.NamespacedName, st, pod, now)
	remove := removable(pod) && !st.removed
	var recheck time.Duration // when to look again at a pod left at grace period 0 (0: no need)
	if left, wait := leftAtGraceZero(pod, now); left && !st.removed {
		if wait > 0 {
			recheck = wait
		} else {
			remove = true
		}
	}
	st.removed = st.removed || remove
	k.mu.Unlock()

	if desired != nil && !sameStatus(view(&pod.Status), view(desired)) {
		keepTransitionTimes(desired, &pod.Status, now)
		if err := k.apply(ctx, pod, desired); err != nil {
			if remove {
				k.unmark(req.NamespacedName, st, func(st *podState) { st.removed = false })
			}
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, err
		}
	}
	if remove {
		// NotFound: gone already. Any other error is retried, a Conflict included, as a real kubelet's status
		// manager retries its delete: a Conflict from the UID precondition means another incarnation holds the
		// name, which the retry's pass sees, but a Conflict for another cause (a perturbation point's, say)
		// leaves this pod terminating with nobody left to delete it.
		if err := k.remove(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
			k.unmark(req.NamespacedName, st, func(st *podState) { st.removed = false })
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, nil
	}
	result := reconcile.Result{}
	if !wake.IsZero() {
		result.RequeueAfter = max(wake.Sub(now), time.Millisecond)
	}
	if recheck > 0 && (result.RequeueAfter == 0 || recheck < result.RequeueAfter) {
		result.RequeueAfter = recheck
	}
	return result, nil
}

// advanceLocked moves st to now and returns the status to report (nil: leave the pod's status alone) and the
// time of the next timed step (zero: none). k.mu must be held.
func (k *kubelet) advanceLocked(kk types.NamespacedName, st *podState, pod *corev1.Pod, now time.Time) (*corev1.PodStatus, time.Time) {
	if pod.DeletionTimestamp != nil {
		if !st.running {
			return nil, time.Time{}
		}
		if !st.terminated && st.exited == nil {
			st.terminated = true
			st.terminateAt = now
			k.dropLocked(kk)
		}
		return k.status(st, pod, false), time.Time{}
	}
	runAt := st.firstSeen.Add(k.opts.StartDelay)
	if now.Before(runAt) {
		return nil, runAt
	}
	if st.exited != nil {
		return k.status(st, pod, false), time.Time{} // terminal: nothing starts it again
	}
	if !st.running {
		st.running = true
		st.start(now, k.opts.ReadyDelay)
		st.annotations = k.watched(pod)
	} else if cur := k.watched(pod); !equalMaps(cur, st.annotations) {
		st.annotations = cur
		if !st.crashing {
			if st.restartAt.IsZero() { // running, not waiting to restart after an exit
				st.lastTerm = &termination{exitCode: 0, reason: "Completed", startedAt: st.startedAt, finishedAt: now}
			}
			st.restarts++
			k.dropLocked(kk)
			st.start(now, k.opts.ReadyDelay)
		}
	}
	switch crash := k.crash[kk]; {
	case crash && !st.crashing:
		st.crashing = true
		st.restartAt = time.Time{}
		st.restarts++
		k.dropLocked(kk)
		st.lastTerm = &termination{exitCode: 1, reason: "Error", startedAt: st.startedAt, finishedAt: now}
		st.backoff = k.opts.CrashLoopBackoff
		st.nextCrash = now.Add(st.backoff)
	case crash && !now.Before(st.nextCrash):
		st.restarts++
		st.lastTerm = &termination{exitCode: 1, reason: "Error", startedAt: now, finishedAt: now}
		st.backoff = min(2*st.backoff, k.opts.CrashLoopMaxBackoff)
		st.nextCrash = now.Add(st.backoff)
	case !crash && st.crashing:
		st.crashing = false
		st.restarts++
		st.start(now, k.opts.ReadyDelay)
	}
	if st.crashing {
		return k.status(st, pod, false), st.nextCrash
	}
	wake, terminal := k.completeLocked(kk, st, pod, now)
	if terminal {
		return k.status(st, pod, false), time.Time{}
	}
	containersReady := st.restartAt.IsZero() && !now.Before(st.readyAt)
	if !containersReady && st.restartAt.IsZero() {
		wake = earliest(wake, st.readyAt)
	}
	return k.status(st, pod, containersReady), wake
}

// start (re)starts st's containers at now: ready after readyDelay.
func (st *podState) start(now time.Time, readyDelay time.Duration) {
	st.startedAt = now
	st.readyAt = now.Add(readyDelay)
	st.restartAt = time.Time{}
}

// completeLocked runs the run-to-completion steps of a running, not crash-looping pod: the containers exit
// once they ran their time, then restart (after a back-off) or leave the pod terminal, as its restartPolicy
// says. It returns the time of its next step (zero: none) and whether the pod is now terminal. k.mu must be
// held.
func (k *kubelet) completeLocked(kk types.NamespacedName, st *podState, pod *corev1.Pod, now time.Time) (time.Time, bool) {
	runFor, code, ok := completion(pod, k.opts.RunFor)
	if !ok {
		if !st.restartAt.IsZero() { // no longer annotated: containers waiting to restart start now
			st.restarts++
			st.start(now, k.opts.ReadyDelay)
		}
		return time.Time{}, false
	}
	if !st.restartAt.IsZero() {
		if now.Before(st.restartAt) {
			return st.restartAt, false
		}
		st.restarts++
		st.start(now, k.opts.ReadyDelay)
	}
	exitAt := st.startedAt.Add(runFor)
	if now.Before(exitAt) {
		return exitAt, false
	}
	term := &termination{exitCode: code, reason: exitReason(code), startedAt: st.startedAt, finishedAt: exitAt}
	k.dropLocked(kk)
	if !restartsAfterExit(pod.Spec.RestartPolicy, code) {
		st.exited = term
		return time.Time{}, true
	}
	st.lastTerm = term
	backoff := time.Duration(0) // the first restart is immediate, as the real kubelet's
	if st.exitRestarts > 0 {
		backoff = min(k.opts.CrashLoopBackoff<<min(st.exitRestarts-1, 20), k.opts.CrashLoopMaxBackoff)
	}
	st.exitRestarts++
	if backoff == 0 {
		st.restarts++
		st.start(now, k.opts.ReadyDelay)
		return st.startedAt.Add(runFor), false
	}
	st.restartAt = now.Add(backoff)
	return st.restartAt, false
}

// earliest returns the earlier of a and b, a zero time counting as none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (k *kubelet) watched(pod *corev1.Pod) map[string]string {
	m := make(map[string]string, len(k.opts.RestartAnnotations))
	for _, a := range k.opts.RestartAnnotations {
		m[a] = pod.Annotations[a]
	}
	return m
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Condition types owned by the kubelet stand-in.
var ownedConditions = []corev1.PodConditionType{
	corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady,
}

// status builds the status the kubelet reports for st (times in whole seconds, as the API stores them).
func (k *kubelet) status(st *podState, pod *corev1.Pod, containersReady bool) *corev1.PodStatus {
	startTime := apiTime(st.firstSeen)
	s := &corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     st.ip,
		PodIPs:    []corev1.PodIP{{IP: st.ip}},
		HostIP:    NodeInternalIP,
		HostIPs:   []corev1.HostIP{{IP: NodeInternalIP}},
		StartTime: &startTime,
	}
	switch {
	case st.exited != nil && st.exited.exitCode != 0:
		s.Phase = corev1.PodFailed
	case st.exited != nil, st.terminated:
		s.Phase = corev1.PodSucceeded
	}
	terminal := s.Phase != corev1.PodRunning
	var unready []string
	for _, c := range pod.Spec.Containers {
		cs := containerStatus(st, pod, c, containersReady)
		if !cs.Ready {
			unready = append(unready, c.Name)
		}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
	cr := len(unready) == 0
	crReason, crMsg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	switch s.Phase {
	case corev1.PodSucceeded:
		crReason, crMsg = "PodCompleted", ""
	case corev1.PodFailed:
		crReason, crMsg = "PodFailed", ""
	}
	readyOK, readyReason, readyMsg := cr, crReason, crMsg
	if readyOK {
		if msg, ok := readinessGatesMessage(pod); !ok {
			readyOK, readyReason, readyMsg = false, "ReadinessGatesNotReady", msg
		}
	}
	s.Conditions = []corev1.PodCondition{
		podCondition(corev1.PodScheduled, true, "", ""),
		podCondition(corev1.PodReadyToStartContainers, !terminal, "", ""),
		podCondition(corev1.PodInitialized, true, "", ""),
		podCondition(corev1.ContainersReady, cr, crReason, crMsg),
		podCondition(corev1.PodReady, readyOK, readyReason, readyMsg),
	}
	return s
}

// apiTime returns t truncated to whole seconds, as the API stores times.
func apiTime(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

// containerStatus builds the status the kubelet reports for container c of pod in state st.
func containerStatus(st *podState, pod *corev1.Pod, c corev1.Container, containersReady bool) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{
		Name:         c.Name,
		Image:        c.Image,
		ImageID:      "ensemble://" + c.Image,
		ContainerID:  fmt.Sprintf("ensemble://%s/%s/%d", pod.UID, c.Name, st.restarts),
		RestartCount: st.restarts,
	}
	switch {
	case st.exited != nil:
		cs.State.Terminated = terminated(st.exited)
	case st.terminated:
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
			StartedAt: apiTime(st.startedAt), FinishedAt: apiTime(st.terminateAt)}
	case st.crashing, !st.restartAt.IsZero():
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off restarting failed container %s", c.Name)}
	default:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: apiTime(st.startedAt)}
		cs.Started = ptrTo(true)
		cs.Ready = containersReady
	}
	if cs.Started == nil {
		cs.Started = ptrTo(false)
	}
	if t := st.lastTerm; t != nil {
		cs.LastTerminationState.Terminated = terminated(t)
	}
	return cs
}

// terminated is the container state of termination t.
func terminated(t *termination) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ExitCode: t.exitCode, Reason: t.reason,
		StartedAt: apiTime(t.startedAt), FinishedAt: apiTime(t.finishedAt)}
}

// readinessGatesMessage checks the pod's readiness gates against its current conditions. It returns ok when
// every gate's condition exists and is True, else the message the kubelet reports for the failing gates.
func readinessGatesMessage(pod *corev1.Pod) (msg string, ok bool) {
	var missing, falseGates []string
	for _, g := range pod.Spec.ReadinessGates {
		c := findCondition(&pod.Status, g.ConditionType)
		switch {
		case c == nil:
			missing = append(missing, string(g.ConditionType))
		case c.Status != corev1.ConditionTrue:
			falseGates = append(falseGates, string(g.ConditionType))
		}
	}
	if len(missing)+len(falseGates) == 0 {
		return "", true
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", strings.Join(missing, ", ")))
	}
	if len(falseGates) > 0 {
		parts = append(parts, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but False", strings.Join(falseGates, ", ")))
	}
	return strings.Join(parts, " "), false
}

// podCondition builds a pod condition of type t: True when ok, else False with reason and msg.
func podCondition(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
	c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
	if !ok {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, reason, msg
	}
	return c
}

func ptrTo[T any](v T) *T { return &v }

func findCondition(s *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

// keepTransitionTimes sets each desired condition's lastTransitionTime: the current one when its status did
// not change, else now.
func keepTransitionTimes(desired, current *corev1.PodStatus, now time.Time) {
	for i := range desired.Conditions {
		c := &desired.Conditions[i]
		if old := findCondition(current, c.Type); old != nil && old.Status == c.Status && !old.LastTransitionTime.IsZero() {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
		}
	}
}

// statusView is the part of a pod status the kubelet owns, in comparable form.
type statusView struct {
	Phase      corev1.PodPhase
	PodIP      string
	HostIP     string
	StartTime  int64
	Conditions string
	Containers string
}

func view(s *corev1.PodStatus) statusView {
	v := statusView{Phase: s.Phase, PodIP: s.PodIP, HostIP: s.HostIP}
	if s.StartTime != nil {
		v.StartTime = s.StartTime.Unix()
	}
	var conds []string
	for _, t := range ownedConditions {
		if c := findCondition(s, t); c != nil {
			conds = append(conds, fmt.Sprintf("%s=%s/%s/%s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	sort.Strings(conds)
	v.Conditions = strings.Join(conds, ";")
	var cs []string
	for _, c := range s.ContainerStatuses {
		started := c.Started != nil && *c.Started
		cs = append(cs, fmt.Sprintf("%s ready=%t started=%t restarts=%d state=%s last=%s",
			c.Name, c.Ready, started, c.RestartCount, stateString(c.State), stateString(c.LastTerminationState)))
	}
	v.Containers = strings.Join(cs, ";")
	return v
}

func stateString(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return fmt.Sprintf("running@%d", s.Running.StartedAt.Unix())
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason
	case s.Terminated != nil:
		return fmt.Sprintf("terminated:%s/%d@%d-%d", s.Terminated.Reason, s.Terminated.ExitCode,
			s.Terminated.StartedAt.Unix(), s.Terminated.FinishedAt.Unix())
	}
	return ""
}

func sameStatus(a, b statusView) bool { return a == b }

// apply writes desired as the kubelet's server-side-applied pod status.
func (k *kubelet) apply(ctx context.Context, pod *corev1.Pod, desired *corev1.PodStatus) error {
	raw, err := json.Marshal(desired)
	if err != nil {
		return err
	}
	sac := &corev1ac.PodStatusApplyConfiguration{}
	if err := json.Unmarshal(raw, sac); err != nil {
		return err
	}
	ac := corev1ac.Pod(pod.Name, pod.Namespace).WithStatus(sac)
	err = k.Client.Status().Apply(ctx, ac, client.FieldOwner(k.opts.FieldOwner), client.ForceOwnership)
	ready := findCondition(desired, corev1.PodReady)
	restarts := int32(0)
	if len(desired.ContainerStatuses) > 0 {
		restarts = desired.ContainerStatuses[0].RestartCount
	}
	k.log.add(Entry{Controller: KubeletControllerName, Namespace: pod.Namespace, Name: pod.Name, Kind: "Pod", Op: "status",
		Detail: fmt.Sprintf("%s ready=%s restarts=%d", desired.Phase, ready.Status, restarts), Err: errText(err)})
	return err
}
