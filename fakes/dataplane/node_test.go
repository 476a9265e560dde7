package dataplane_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fakes/dataplane"
)

// ops returns "op name" for every entry of ns whose Op is one of ops, failed writes marked.
func ops(ns string, ops ...string) []string {
	var out []string
	for _, e := range dp.Log(ns) {
		for _, op := range ops {
			if e.Op == op {
				s := e.Op + " " + e.Name
				if e.Err != "" {
					s += " FAILED: " + e.Err
				}
				out = append(out, s)
			}
		}
	}
	return out
}

func TestPodBoundToNodeThroughBinding(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)

	// The node exists from setup: Ready, with an InternalIP and allocatable resources.
	node := &corev1.Node{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: dataplane.DefaultNodeName}, node)).To(Succeed())
	var ready corev1.ConditionStatus
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status
		}
	}
	g.Expect(ready).To(Equal(corev1.ConditionTrue))
	g.Expect(node.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: dataplane.NodeInternalIP}))
	g.Expect(node.Status.Allocatable.Pods().Value()).To(BeNumerically(">", 0))
	g.Expect(node.Status.Allocatable.Cpu().IsZero()).To(BeFalse())
	g.Expect(node.Status.Allocatable.Memory().IsZero()).To(BeFalse())
	g.Expect(node.Spec.PodCIDR).To(Equal(dataplane.PodCIDR))
	// The API server's own version, read at setup (no Options.KubeletVersion here).
	g.Expect(node.Status.NodeInfo.KubeletVersion).To(MatchRegexp(`^v1\.[0-9]+\.[0-9]+`))

	// Its Lease is renewed by the kubelet.
	g.Eventually(func(g Gomega) {
		l := &coordinationv1.Lease{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: corev1.NamespaceNodeLease, Name: dataplane.DefaultNodeName}, l)).To(Succeed())
		g.Expect(l.Spec.HolderIdentity).To(HaveValue(Equal(dataplane.DefaultNodeName)))
		g.Expect(l.Spec.RenewTime).NotTo(BeNil())
	}).WithTimeout(5 * time.Second).Should(Succeed())

	g.Expect(k8s.Create(ctx, newPod(ns, "unscheduled"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "unscheduled")
		g.Expect(p.Spec.NodeName).To(Equal(dataplane.DefaultNodeName))
		g.Expect(condition(p, corev1.PodScheduled).Status).To(Equal(corev1.ConditionTrue))
		g.Expect(condition(p, corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
		g.Expect(p.Status.HostIP).To(Equal(dataplane.NodeInternalIP))
	}).Should(Succeed())
	// Through pods/binding, before the first status write; nobody updated spec.nodeName directly.
	g.Expect(details(ns)[0]).To(Equal("node " + dataplane.DefaultNodeName))
	g.Expect(ops(ns, "bind")).To(Equal([]string{"bind unscheduled"}))
	for _, m := range getPod(g, ns, "unscheduled").ManagedFields {
		if m.FieldsV1 != nil {
			g.Expect(string(m.FieldsV1.Raw)).NotTo(ContainSubstring(`"f:nodeName"`), "manager %s", m.Manager)
		}
	}

	// A pod with a scheduling gate waits, unbound and Pending, until the gate goes.
	gated := newPod(ns, "gated")
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}}
	g.Expect(k8s.Create(ctx, gated)).To(Succeed())
	g.Consistently(func(g Gomega) {
		p := getPod(g, ns, "gated")
		g.Expect(p.Spec.NodeName).To(BeEmpty())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodPending))
	}).WithTimeout(300 * time.Millisecond).Should(Succeed())
	p := getPod(g, ns, "gated")
	base := p.DeepCopy()
	p.Spec.SchedulingGates = nil
	g.Expect(k8s.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "gated")
		g.Expect(p.Spec.NodeName).To(Equal(dataplane.DefaultNodeName))
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
	}).Should(Succeed())

	// A pod created with a nodeName is run as it is, not bound again.
	pinned := newPod(ns, "pinned")
	pinned.Spec.NodeName = dataplane.DefaultNodeName
	g.Expect(k8s.Create(ctx, pinned)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(condition(getPod(g, ns, "pinned"), corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
	}).Should(Succeed())
	g.Expect(ops(ns, "bind")).To(Equal([]string{"bind unscheduled", "bind gated"}))
}

func TestRunningPodsHaveDistinctIPs(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, n := range names {
		p := newPod(ns, n)
		p.Annotations = map[string]string{configSuffix: "v1"}
		g.Expect(k8s.Create(context.Background(), p)).To(Succeed())
	}
	cidr := netip.MustParsePrefix(dataplane.PodCIDR)
	ips := map[string]string{}
	g.Eventually(func(g Gomega) {
		seen := map[string]string{}
		for _, n := range names {
			p := getPod(g, ns, n)
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			g.Expect(p.Status.HostIP).To(Equal(dataplane.NodeInternalIP))
			g.Expect(p.Status.HostIPs).To(Equal([]corev1.HostIP{{IP: dataplane.NodeInternalIP}}))
			ip := p.Status.PodIP
			g.Expect(p.Status.PodIPs).To(Equal([]corev1.PodIP{{IP: ip}}))
			addr, err := netip.ParseAddr(ip)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cidr.Contains(addr)).To(BeTrue(), "pod %s has IP %s outside %s", n, ip, cidr)
			g.Expect(seen).NotTo(HaveKey(ip), "pods %s and %s share IP %s", seen[ip], n, ip)
			seen[ip] = n
			ips[n] = ip
		}
	}).Should(Succeed())

	// Stable for the pod's life: an in-place restart keeps it.
	patchAnnotation(g, ns, "a", configSuffix, "v2")
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "a")
		g.Expect(restarts(p)).To(Equal([]int32{1, 1}))
		g.Expect(condition(p, corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
	}).Should(Succeed())
	g.Expect(getPod(g, ns, "a").Status.PodIP).To(Equal(ips["a"]))
}

// TestPodIPsRefuseConnectionsAtOnce: an operator that calls a pod's IP (KubeRay's Serve proxy health check,
// any client of a pod's own server) is refused at once, whatever the machine's network: no container
// listens, and a dial that waited for a SYN to time out would stall the operator's reconcile for its client's
// timeout. The pod IPs are still ones the API server takes as an EndpointSlice's addresses, which
// kube-controller-manager's endpoint controllers publish.
func TestPodIPsRefuseConnectionsAtOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	g.Expect(k8s.Create(ctx, newPod(ns, "server"))).To(Succeed())
	var ip string
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "server")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		ip = p.Status.PodIP
		g.Expect(ip).NotTo(BeEmpty())
	}).Should(Succeed())

	// A stalled dial lasts the whole timeout (a dropped SYN is retried after 1 s; a gateway that never
	// answers ARP takes 3 s); a refusal comes from the local kernel in microseconds.
	const stall = 2 * time.Second
	for _, port := range []string{"80", "8000", "8265"} {
		start := time.Now()
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, port), stall)
		took := time.Since(start)
		if conn != nil {
			_ = conn.Close()
		}
		g.Expect(err).To(HaveOccurred(), "a TCP connection to pod IP %s:%s was accepted: something on this machine's network answers for it", ip, port)
		var ne net.Error
		g.Expect(errors.As(err, &ne) && ne.Timeout()).To(BeFalse(), "dial %s:%s stalled until its timeout: %v", ip, port, err)
		g.Expect(took).To(BeNumerically("<", stall/4), "dial %s:%s took %s before it failed: %v", ip, port, took, err)
	}

	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "server"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
	}
	g.Expect(k8s.Create(ctx, slice)).To(Succeed(), "the API server refuses pod IP %s as an endpoint address", ip)
}

func TestGracefulDeletion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	held := newPod(ns, "held")
	held.Finalizers = []string{"ensemble.test/hold"}
	for _, p := range []*corev1.Pod{newPod(ns, "plain"), held} {
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
	}
	for _, n := range []string{"plain", "held"} {
		g.Eventually(func(g Gomega) {
			p := getPod(g, ns, n)
			g.Expect(p.Spec.NodeName).NotTo(BeEmpty())
			g.Expect(condition(p, corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
		}).Should(Succeed())
	}

	// Without a finalizer: the API server only marks it (grace period 30 s: it has a nodeName); the kubelet
	// deletes it with grace period 0, well within the 30 s.
	g.Expect(k8s.Delete(ctx, getPod(g, ns, "plain"))).To(Succeed())
	g.Eventually(exists(ns, "plain", &corev1.Pod{})).WithTimeout(5 * time.Second).Should(BeFalse())
	// (The log entry is added when the delete returns, which can be after the pod is seen gone.)
	g.Eventually(func() []string { return ops(ns, "remove") }).Should(Equal([]string{"remove plain"}))

	// With a finalizer: terminated and kept, with its graceful deletion, until the finalizer goes.
	g.Expect(k8s.Delete(ctx, getPod(g, ns, "held"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "held")
		g.Expect(p.DeletionTimestamp).NotTo(BeNil())
		g.Expect(p.DeletionGracePeriodSeconds).To(HaveValue(BeNumerically(">", 0)))
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
	}).Should(Succeed())
	g.Consistently(exists(ns, "held", &corev1.Pod{})).WithTimeout(300 * time.Millisecond).Should(BeTrue())
	g.Expect(ops(ns, "remove")).To(Equal([]string{"remove plain"}), "no delete while the finalizer is there")

	p := getPod(g, ns, "held")
	base := p.DeepCopy()
	p.Finalizers = nil
	g.Expect(k8s.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
	g.Eventually(exists(ns, "held", &corev1.Pod{})).WithTimeout(5 * time.Second).Should(BeFalse())
	g.Eventually(func() []string { return ops(ns, "remove") }).Should(Equal([]string{"remove plain", "remove held"}))
}

// jobPod returns a pod owned by job, with restart policy policy and the annotations kv (key, value, ...).
func jobPod(job *batchv1.Job, name string, policy corev1.RestartPolicy, kv ...string) *corev1.Pod {
	p := newPod(job.Namespace, name)
	p.Spec.RestartPolicy = policy
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
		Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}
	p.Annotations = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		p.Annotations[kv[i]] = kv[i+1]
	}
	return p
}

func terminations(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil {
			out = append(out, fmt.Sprintf("%s/%d", t.Reason, t.ExitCode))
		} else {
			out = append(out, "not terminated")
		}
	}
	return out
}

func TestJobPodsRunToCompletion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	// A real (suspended) Job as owner: the collector removes a pod whose owner does not exist.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "work"}, Spec: batchv1.JobSpec{
		Suspend: ptr(true),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "example.com/main:v1"}}}},
	}}
	g.Expect(k8s.Create(ctx, job)).To(Succeed())

	created := time.Now()
	for _, p := range []*corev1.Pod{
		jobPod(job, "ok", corev1.RestartPolicyNever),
		jobPod(job, "fails", corev1.RestartPolicyNever, dataplane.AnnotationExitCode, "3"),
		jobPod(job, "slow", corev1.RestartPolicyNever, dataplane.AnnotationRunFor, "800ms"),
		jobPod(job, "retries", corev1.RestartPolicyOnFailure, dataplane.AnnotationExitCode, "3"),
	} {
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
	}

	// Default RunFor (100ms): Running, then Succeeded with every container Completed/0.
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "ok")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
		g.Expect(terminations(p)).To(Equal([]string{"Completed/0", "Completed/0"}))
		g.Expect(condition(p, corev1.PodReady).Reason).To(Equal("PodCompleted"))
		g.Expect(restarts(p)).To(Equal([]int32{0, 0}))
	}).WithTimeout(5 * time.Second).Should(Succeed())
	// (The log entry is added when the write returns, which can be after the pod is seen.) Whether the
	// containers' ready step is written before the completion depends on timing: on a loaded machine both are
	// due in the same pass, and a pod may complete before it was ever ready. What must hold: Running first,
	// then one Succeeded, last.
	g.Eventually(func(g Gomega) {
		var phases []string
		for _, e := range dp.Log(ns) {
			if e.Name == "ok" && e.Op == "status" {
				phases = append(phases, e.Detail)
			}
		}
		g.Expect(len(phases)).To(BeNumerically(">=", 2), "status writes %q", phases)
		g.Expect(phases[len(phases)-1]).To(HavePrefix("Succeeded"), "status writes %q", phases)
		for _, ph := range phases[:len(phases)-1] {
			g.Expect(ph).To(HavePrefix("Running"), "status writes %q", phases)
		}
	}).Should(Succeed())

	// exit-code 3 under Never: Failed, the code in every container's status.
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "fails")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodFailed))
		g.Expect(terminations(p)).To(Equal([]string{"Error/3", "Error/3"}))
		g.Expect(p.Status.ContainerStatuses[0].State.Terminated.ExitCode).To(BeEquivalentTo(3))
		g.Expect(condition(p, corev1.PodReady).Reason).To(Equal("PodFailed"))
	}).WithTimeout(5 * time.Second).Should(Succeed())

	// run-for overrides the default: Running, then Succeeded no sooner than 800ms after the pod was
	// created (read from the fake's log, so a loaded machine's late observation cannot shorten it).
	g.Eventually(func(g Gomega) {
		g.Expect(getPod(g, ns, "slow").Status.Phase).To(Equal(corev1.PodRunning))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getPod(g, ns, "slow").Status.Phase).To(Equal(corev1.PodSucceeded))
	}).WithTimeout(5 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var done time.Time
		for _, e := range dp.Log(ns) {
			if e.Name == "slow" && e.Op == "status" && strings.HasPrefix(e.Detail, "Succeeded") {
				done = e.Time
			}
		}
		g.Expect(done).NotTo(BeZero(), "no Succeeded status write of slow in the fake's log")
		g.Expect(done.Sub(created)).To(BeNumerically(">=", 800*time.Millisecond), "slow ended before its run-for")
	}).Should(Succeed())

	// OnFailure with a failing code: restarted, never terminal.
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "retries")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Status.ContainerStatuses[0].RestartCount).To(BeNumerically(">=", 2))
		last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
		g.Expect(last).NotTo(BeNil())
		g.Expect(last.ExitCode).To(BeEquivalentTo(3))
	}).WithTimeout(5 * time.Second).Should(Succeed())

	// A terminal pod stays as it is: a config change does not restart it.
	patchAnnotation(g, ns, "ok", configSuffix, "changed")
	g.Consistently(func(g Gomega) {
		p := getPod(g, ns, "ok")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
		g.Expect(restarts(p)).To(Equal([]int32{0, 0}))
	}).WithTimeout(200 * time.Millisecond).Should(Succeed())
}

// TestAnnotatedPodsRunToCompletion: run-for makes any pod complete; restartPolicy decides what follows.
func TestAnnotatedPodsRunToCompletion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	once := newPod(ns, "once")
	once.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	once.Annotations = map[string]string{dataplane.AnnotationRunFor: "50ms"}
	again := newPod(ns, "again") // restartPolicy Always (the default)
	again.Annotations = map[string]string{dataplane.AnnotationRunFor: "50ms"}
	plain := newPod(ns, "plain") // exit-code alone does not make a pod complete
	plain.Annotations = map[string]string{dataplane.AnnotationExitCode: "1"}
	for _, p := range []*corev1.Pod{once, again, plain} {
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
	}
	_ = dp.OpenConnection(ns, "once")

	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "once")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
		g.Expect(terminations(p)).To(Equal([]string{"Completed/0", "Completed/0"}))
	}).WithTimeout(5 * time.Second).Should(Succeed())
	g.Expect(dp.Dropped(ns, "once")).To(Equal(1), "the exit drops held connections")

	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "again")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Status.ContainerStatuses[0].RestartCount).To(BeNumerically(">=", 2))
		last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
		g.Expect(last).NotTo(BeNil())
		g.Expect(last.Reason).To(Equal("Completed"))
	}).WithTimeout(5 * time.Second).Should(Succeed())

	g.Consistently(func(g Gomega) {
		p := getPod(g, ns, "plain")
		g.Expect(p.Status.Phase).NotTo(BeElementOf(corev1.PodSucceeded, corev1.PodFailed))
		g.Expect(restarts(p)).NotTo(ContainElement(BeNumerically(">", 0)))
	}).WithTimeout(400 * time.Millisecond).Should(Succeed())

	// A terminal pod is deleted at once by the API server (grace period 0), the kubelet not involved.
	g.Expect(k8s.Delete(ctx, getPod(g, ns, "once"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "once"}, &corev1.Pod{}))
	}).Should(BeTrue())
	g.Expect(ops(ns, "remove")).To(BeEmpty())
}

// exists reports, each time it is called, whether ns/name (of obj's kind) is still there.
func exists(ns, name string, obj client.Object) func() bool {
	return func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
		return !apierrors.IsNotFound(err)
	}
}
