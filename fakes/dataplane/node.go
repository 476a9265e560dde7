package dataplane

import (
	"context"
	"encoding/binary"
	"net/netip"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// The kubelet's node.
const (
	// NodeInternalIP is the InternalIP address of the kubelet's Node, reported as every pod's status.hostIP.
	NodeInternalIP = "192.168.0.2"
	// PodCIDR is the Node's spec.podCIDR; every pod the kubelet runs gets an IP from it, unique among the pods
	// that exist (239.244.0.1 to 239.244.255.254, handed out in turn, an IP reused only after the range
	// wrapped). The range is multicast (organization-local, RFC 2365) so that an operator that dials a pod's IP
	// is refused at once on any machine: no container listens, and the kernel refuses a TCP connect to a
	// multicast address before any packet leaves (Linux: "network is unreachable"; BSDs: EAFNOSUPPORT). A
	// unicast range stalls such a dial until the client's timeout where the network drops the SYN (10.244.x
	// did: KubeRay's 2 s client timeout per call), or reaches whatever the network answers with; loopback
	// reaches any server bound to 0.0.0.0, and the API server refuses loopback and link-local addresses in
	// Endpoints and EndpointSlices, where it takes these.
	PodCIDR = "239.244.0.0/16"
	// NodeLeaseDurationSeconds is the leaseDurationSeconds of the node Lease, as the real kubelet's (40 s).
	NodeLeaseDurationSeconds = 40
)

// Node allocatable (and capacity): generous, so that nothing that counts resources turns a pod away.
var nodeResources = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("64"),
	corev1.ResourceMemory:           resource.MustParse("256Gi"),
	corev1.ResourcePods:             resource.MustParse("1000"),
	corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
}

// node returns the Node the kubelet registers: Ready, without pressure, with its addresses and resources.
func (k *kubelet) node(now time.Time) *corev1.Node {
	name := k.opts.NodeName
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: runtime.GOARCH,
		}},
		Spec: corev1.NodeSpec{PodCIDR: PodCIDR, PodCIDRs: []string{PodCIDR}},
		Status: corev1.NodeStatus{
			Capacity:    nodeResources.DeepCopy(),
			Allocatable: nodeResources.DeepCopy(),
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: NodeInternalIP},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: runtime.GOARCH,
				ContainerRuntimeVersion: "ensemble://", KubeletVersion: k.version},
		},
	}
}

// ensureNode creates the kubelet's Node with its status when no Node of that name exists; an existing one is
// left as it is.
func (k *kubelet) ensureNode(ctx context.Context) error {
	n := k.node(time.Now())
	err := k.Client.Create(ctx, n, client.FieldOwner(k.opts.FieldOwner))
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	k.log.add(Entry{Controller: KubeletControllerName, Name: n.Name, Kind: "Node", Op: "create",
		Detail: "Ready, InternalIP " + NodeInternalIP, Err: errText(err)})
	return err
}

// heartbeat renews the node Lease every Options.NodeLeaseRenewInterval while the manager runs. It is a plain
// runnable (not a controller: the harness records its writes outside any reconcile pass) that needs no
// leader election.
type heartbeat struct{ k *kubelet }

// NeedLeaderElection implements manager.LeaderElectionRunnable: every kubelet heartbeats.
func (h heartbeat) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: renew now, then at every tick until ctx is done.
func (h heartbeat) Start(ctx context.Context) error {
	t := time.NewTicker(h.k.opts.NodeLeaseRenewInterval)
	defer t.Stop()
	for {
		h.k.renewLease(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

var _ manager.LeaderElectionRunnable = heartbeat{}

// renewLease applies the node Lease with renewTime now. A failure is logged; the next tick tries again.
func (k *kubelet) renewLease(ctx context.Context) {
	ac := coordinationv1ac.Lease(k.opts.NodeName, corev1.NamespaceNodeLease).WithSpec(coordinationv1ac.LeaseSpec().
		WithHolderIdentity(k.opts.NodeName).
		WithLeaseDurationSeconds(NodeLeaseDurationSeconds).
		WithRenewTime(metav1.NowMicro()))
	err := k.Client.Apply(ctx, ac, client.FieldOwner(k.opts.FieldOwner), client.ForceOwnership)
	if ctx.Err() != nil {
		return // the manager stopped mid-write
	}
	k.log.add(Entry{Controller: KubeletControllerName, Namespace: corev1.NamespaceNodeLease, Name: k.opts.NodeName,
		Kind: "Lease", Op: "renew", Err: errText(err)})
}

// bind assigns pod to the kubelet's node through the pods/binding subresource (spec.nodeName cannot be
// updated directly), with the pod's UID as precondition.
func (k *kubelet) bind(ctx context.Context, pod *corev1.Pod) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: k.opts.NodeName},
	}
	err := k.Client.SubResource("binding").Create(ctx, pod, b, client.FieldOwner(k.opts.FieldOwner))
	k.log.add(Entry{Controller: KubeletControllerName, Namespace: pod.Namespace, Name: pod.Name, Kind: "Pod", Op: "bind",
		Detail: "node " + k.opts.NodeName, Err: errText(err)})
	return err
}

// remove deletes the terminating pod with grace period 0 (the kubelet's last word on a pod), with its UID as
// precondition.
func (k *kubelet) remove(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	err := k.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
	k.log.add(Entry{Controller: KubeletControllerName, Namespace: pod.Namespace, Name: pod.Name, Kind: "Pod", Op: "remove",
		Detail: "grace period 0", Err: errText(err)})
	return err
}

// removable reports whether the kubelet must delete pod now: it is terminating, bound to a node, its
// finalizers are gone, and its grace period is not already 0 (then the API server removes it itself, see
// leftAtGraceZero).
func removable(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil && pod.Spec.NodeName != "" && len(pod.Finalizers) == 0 &&
		(pod.DeletionGracePeriodSeconds == nil || *pod.DeletionGracePeriodSeconds > 0)
}

// stuckAfter is how long after its deletionTimestamp a bound pod with grace period 0 and no finalizers may still
// be there before the kubelet deletes it (2 s: the timestamp has whole seconds, and the API server removes such
// a pod within the request that set it).
const stuckAfter = 2 * time.Second

// leftAtGraceZero reports whether pod is bound, has no finalizers and was left terminating with grace period 0,
// and how long until it counts as stuck (0: it does now). The API server deletes in two phases (it sets
// deletionTimestamp and the grace period, then removes the pod), so a terminal pod deleted with grace period 0
// shows in that state for a moment. A delete cut short between the phases (its client went away mid-request, as
// a restart point stopping the kubelet during its own grace-0 delete) leaves the pod there with nobody to remove
// it. The real kubelet's status manager deletes every terminated pod still there, whatever its grace period
// (canBeDeleted), and the API server finishes such a delete at once (BeforeDelete treats a stored grace
// period of 0 as a delete to finish).
func leftAtGraceZero(pod *corev1.Pod, now time.Time) (bool, time.Duration) {
	if pod.DeletionTimestamp == nil || pod.Spec.NodeName == "" || len(pod.Finalizers) > 0 ||
		pod.DeletionGracePeriodSeconds == nil || *pod.DeletionGracePeriodSeconds != 0 {
		return false, 0
	}
	return true, max(pod.DeletionTimestamp.Add(stuckAfter).Sub(now), 0)
}

// ipPool hands out pod IPs from PodCIDR, in turn, skipping those held by pods that still exist.
type ipPool struct {
	base  uint32
	size  uint32 // usable offsets are 1..size
	next  uint32
	inUse map[uint32]bool
}

func newIPPool() *ipPool {
	p := netip.MustParsePrefix(PodCIDR)
	a := p.Addr().As4()
	return &ipPool{base: binary.BigEndian.Uint32(a[:]), size: 1<<(32-p.Bits()) - 2, inUse: map[uint32]bool{}}
}

// allocate returns a free IP and its offset (0 and "" when every IP is held).
func (p *ipPool) allocate() (uint32, string) {
	for range p.size {
		p.next = p.next%p.size + 1
		if !p.inUse[p.next] {
			p.inUse[p.next] = true
			var a [4]byte
			binary.BigEndian.PutUint32(a[:], p.base+p.next)
			return p.next, netip.AddrFrom4(a).String()
		}
	}
	return 0, ""
}

// release frees the IP of offset off (0: nothing).
func (p *ipPool) release(off uint32) { delete(p.inUse, off) }
