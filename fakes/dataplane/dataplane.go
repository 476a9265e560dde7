// Package dataplane simulates the node that envtest lacks: a kubelet (one Ready Node, pod binding, pod IPs,
// pod phase, container statuses, readiness, in-place restarts, crash loops, run-to-completion pods, graceful
// deletion, held client connections). Garbage collection, namespace deletion and the workload controllers
// are the real ones: suite.Boot runs kube-controller-manager beside envtest.
//
// It knows no operator. Wire it into a manager with New(opts).SetupWithManager(mgr); under ensemble,
// DataPlane.ManagerOptions gives the suite.ManagerOptions that do so. The kubelet acts in every namespace.
//
// Everything is event-driven (controller-runtime informers); timers (RequeueAfter) are used only for the
// configured delays, and every timer is re-checked against the clock on wake-up, so a harness that shortens
// requeues (requeue compression) or an extra reconcile never makes a step happen early.
package dataplane

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Names the kubelet stand-in goes by.
const (
	// KubeletControllerName names the kubelet stand-in's controller (it reconciles Pods); the harness
	// attributes its passes and writes to it.
	KubeletControllerName = "dataplane-kubelet"
	// DefaultFieldOwner is the server-side-apply field manager of the kubelet's pod status writes.
	DefaultFieldOwner = "ensemble-dataplane"
	// DefaultNodeName is the name of the kubelet's Node when Options.NodeName is empty.
	DefaultNodeName = "ensemble-node"
)

// Options configures a DataPlane. The zero value of every field means its default (see DefaultOptions).
type Options struct {
	// StartDelay is the time from the kubelet's first sight of a pod (its binding, for a pod created without
	// nodeName) to phase Running with its containers started (not yet ready). Default 20ms.
	StartDelay time.Duration
	// ReadyDelay is the time from a container start (first start, in-place restart, end of a crash loop) to
	// the container being ready. Default 30ms.
	ReadyDelay time.Duration
	// RestartAnnotations lists pod annotation keys whose value the containers read (for example MatrixOne's
	// "matrixorigin.io/config-suffix"). A change of such a value on a running pod (absent counts as "") is an
	// in-place restart: restartCount + 1, same pod UID, containers not ready for ReadyDelay, held connections
	// dropped. Default none.
	RestartAnnotations []string
	// CrashLoopBackoff is the first back-off between restarts of a crash-looping pod; it doubles after each
	// restart up to CrashLoopMaxBackoff. Defaults 50ms and 800ms.
	CrashLoopBackoff time.Duration
	// CrashLoopMaxBackoff caps CrashLoopBackoff. Default 800ms.
	CrashLoopMaxBackoff time.Duration
	// FieldOwner is the field manager of the kubelet's server-side-apply status writes. Default
	// "ensemble-dataplane".
	FieldOwner string
	// NodeName is the name of the one Node the kubelet registers at setup (created when absent, Ready, with
	// address NodeInternalIP and pod CIDR PodCIDR) and binds every unscheduled pod to. Default
	// "ensemble-node" (DefaultNodeName).
	NodeName string
	// KubeletVersion is the kubelet version the Node reports (status.nodeInfo.kubeletVersion, e.g. "v1.37.2").
	// Empty reports the API server's own version, read at setup, as a node of a fresh cluster does.
	KubeletVersion string
	// NodeLeaseRenewInterval is how often the kubelet renews its node's Lease (namespace kube-node-lease,
	// name NodeName, duration 40 s), so that a node lifecycle controller keeps the node Ready. Default 10s,
	// as the real kubelet; negative: no Lease at all.
	NodeLeaseRenewInterval time.Duration
	// RunFor is how long the containers of a pod that runs to completion (one owned by a batch Job, or
	// annotated AnnotationRunFor) run from their start before they exit (with code 0, or the one annotated
	// AnnotationExitCode). The annotation AnnotationRunFor overrides it per pod. Default 100ms.
	RunFor time.Duration
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	return Options{}.withDefaults()
}

func (o Options) withDefaults() Options {
	if o.StartDelay <= 0 {
		o.StartDelay = 20 * time.Millisecond
	}
	if o.ReadyDelay <= 0 {
		o.ReadyDelay = 30 * time.Millisecond
	}
	if o.CrashLoopBackoff <= 0 {
		o.CrashLoopBackoff = 50 * time.Millisecond
	}
	if o.CrashLoopMaxBackoff <= 0 {
		o.CrashLoopMaxBackoff = 800 * time.Millisecond
	}
	if o.CrashLoopMaxBackoff < o.CrashLoopBackoff {
		o.CrashLoopMaxBackoff = o.CrashLoopBackoff
	}
	if o.FieldOwner == "" {
		o.FieldOwner = DefaultFieldOwner
	}
	if o.NodeName == "" {
		o.NodeName = DefaultNodeName
	}
	if o.NodeLeaseRenewInterval == 0 {
		o.NodeLeaseRenewInterval = 10 * time.Second
	}
	if o.RunFor <= 0 {
		o.RunFor = 100 * time.Millisecond
	}
	o.RestartAnnotations = append([]string(nil), o.RestartAnnotations...)
	return o
}

// DataPlane is the kubelet stand-in with its write log. Create it with New. Its query methods are safe for
// concurrent use.
type DataPlane struct {
	// kubelet is the "dataplane-kubelet" controller.
	kubelet *kubelet
	log     *writeLog
}

// New returns a DataPlane configured by opts (zero fields take their defaults). Nothing runs until it is set up
// with a manager and the manager starts.
func New(opts Options) *DataPlane {
	opts = opts.withDefaults()
	l := &writeLog{}
	return &DataPlane{
		kubelet: newKubelet(opts, l),
		log:     l,
	}
}

// SetupWithManager registers the kubelet with mgr, writing through mgr.GetClient().
func (d *DataPlane) SetupWithManager(mgr ctrl.Manager) error {
	if err := d.kubelet.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("dataplane: set up %s: %w", KubeletControllerName, err)
	}
	return nil
}

// RestartCount returns the restart count the kubelet reports for every container of the pod namespace/name
// (in-place restarts plus crash-loop restarts of its current incarnation), or 0 for a pod it has not seen.
func (d *DataPlane) RestartCount(namespace, pod string) int32 {
	return d.kubelet.RestartCount(namespace, pod)
}

// OpenConnection registers one client connection held to the pod namespace/name and returns a function that
// closes it normally (not counted as dropped; calling it again, or after the connection was dropped, does
// nothing). An in-place restart, a crash or the pod's termination or disappearance drops every connection held
// at that moment and adds them to Dropped.
func (d *DataPlane) OpenConnection(namespace, pod string) (closeConn func()) {
	return d.kubelet.OpenConnection(namespace, pod)
}

// Connections returns the number of connections currently held to the pod namespace/name.
func (d *DataPlane) Connections(namespace, pod string) int {
	return d.kubelet.Connections(namespace, pod)
}

// Dropped returns the number of held connections to the pod name namespace/name dropped so far (cumulative over
// every incarnation of that name).
func (d *DataPlane) Dropped(namespace, pod string) int { return d.kubelet.Dropped(namespace, pod) }

// CrashLoop turns crash-loop injection on or off for the pod namespace/name. On: its containers crash at once
// (connections dropped, restartCount + 1) and keep crashing with a doubling back-off (restartCount + 1 each
// time), not ready, phase still Running. Off: the containers start once more (restartCount + 1) and become
// ready after ReadyDelay. The switch is kept by name, so it also applies to a pod created later with that name.
func (d *DataPlane) CrashLoop(namespace, pod string, on bool) {
	d.kubelet.CrashLoop(namespace, pod, on)
}

// Log returns a copy of the write log entries of namespace, oldest first ("" returns the entries of
// cluster-scoped objects).
func (d *DataPlane) Log(namespace string) []Entry { return d.log.get(namespace) }

// Entry is one write made (or attempted) by a DataPlane controller.
type Entry struct {
	// Time is when the write returned.
	Time time.Time
	// Controller is "dataplane-kubelet".
	Controller string
	// Namespace and Name identify the object written ("" namespace for a cluster-scoped object).
	Namespace, Name string
	// Kind is the object's kind, e.g. "Pod".
	Kind string
	// Op is the write: "status" (kubelet status apply), "bind" (kubelet binds a pod to its node through
	// pods/binding), "remove" (kubelet deletes a terminating pod with grace period 0), "create" (kubelet
	// registers its Node) or "renew" (kubelet renews its node Lease).
	Op string
	// Detail describes the write in a few words (e.g. "Running ready=false restarts=1").
	Detail string
	// Err is the error text when the write failed, else "".
	Err string
}

type writeLog struct {
	mu      sync.Mutex
	entries []Entry
}

func (l *writeLog) add(e Entry) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

func (l *writeLog) get(ns string) []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []Entry{}
	for _, e := range l.entries {
		if e.Namespace == ns {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func key(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}
