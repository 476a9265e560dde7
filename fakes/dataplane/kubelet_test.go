package dataplane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fakes/dataplane"
)

const gate corev1.PodConditionType = "example.com/data-ready"

func newPod(ns, name string, gates ...corev1.PodConditionType) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "main", Image: "example.com/main:v1"},
			{Name: "sidecar", Image: "example.com/sidecar:v1"},
		}},
	}
	for _, g := range gates {
		p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: g})
	}
	return p
}

func getPod(g Gomega, ns, name string) *corev1.Pod {
	p := &corev1.Pod{}
	g.Expect(k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, p)).To(Succeed())
	return p
}

func condition(p *corev1.Pod, t corev1.PodConditionType) corev1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return corev1.PodCondition{}
}

func restarts(p *corev1.Pod) []int32 {
	var out []int32
	for _, c := range p.Status.ContainerStatuses {
		out = append(out, c.RestartCount)
	}
	return out
}

// setGate applies the gate condition as an operator would: server-side apply with the operator's own owner.
func setGate(g Gomega, ns, name string, status corev1.ConditionStatus) {
	ac := corev1ac.Pod(name, ns).WithStatus(corev1ac.PodStatus().WithConditions(
		corev1ac.PodCondition().WithType(gate).WithStatus(status).WithReason("Test").
			WithLastTransitionTime(metav1.Now())))
	g.Expect(k8s.Status().Apply(context.Background(), ac, client.FieldOwner("test-operator"), client.ForceOwnership)).To(Succeed())
}

// statusFields returns the status managedFields JSON of manager on p.
func statusFields(p *corev1.Pod, manager string) string {
	var s []string
	for _, m := range p.ManagedFields {
		if m.Manager == manager && m.Subresource == "status" && m.FieldsV1 != nil {
			s = append(s, string(m.FieldsV1.Raw))
		}
	}
	return strings.Join(s, "\n")
}

func TestPodLifecycleWithoutGates(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	g.Expect(k8s.Create(context.Background(), newPod(ns, "plain"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "plain")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(condition(p, corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
		g.Expect(p.Status.PodIP).NotTo(BeEmpty())
		g.Expect(p.Status.StartTime).NotTo(BeNil())
		g.Expect(p.Status.ContainerStatuses).To(HaveLen(2))
		for _, c := range p.Status.ContainerStatuses {
			g.Expect(c.Ready).To(BeTrue())
			g.Expect(*c.Started).To(BeTrue())
			g.Expect(c.RestartCount).To(BeZero())
			g.Expect(c.State.Running).NotTo(BeNil())
		}
	}).Should(Succeed())
	// Bound, then Pending -> Running (not ready) -> ready, each a separate status write (the log entry is
	// added when the write returns, which can be after the pod is seen).
	g.Eventually(func() []string { return details(ns) }).Should(Equal([]string{
		"node " + dataplane.DefaultNodeName, "Running ready=False restarts=0", "Running ready=True restarts=0"}))
}

// details returns the Detail of every log entry of ns, failed writes marked.
func details(ns string) []string {
	var out []string
	for _, e := range dp.Log(ns) {
		if e.Err != "" {
			out = append(out, "FAILED "+e.Detail+": "+e.Err)
			continue
		}
		out = append(out, e.Detail)
	}
	return out
}

func TestReadyOnlyWhenReadinessGateTrue(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	g.Expect(k8s.Create(context.Background(), newPod(ns, "gated", gate))).To(Succeed())

	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "gated")
		g.Expect(condition(p, corev1.ContainersReady).Status).To(Equal(corev1.ConditionTrue))
		ready := condition(p, corev1.PodReady)
		g.Expect(ready.Status).To(Equal(corev1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal("ReadinessGatesNotReady"))
	}).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(condition(getPod(g, ns, "gated"), corev1.PodReady).Status).To(Equal(corev1.ConditionFalse))
	}).WithTimeout(200 * time.Millisecond).Should(Succeed())

	setGate(g, ns, "gated", corev1.ConditionFalse)
	g.Consistently(func(g Gomega) {
		g.Expect(condition(getPod(g, ns, "gated"), corev1.PodReady).Status).To(Equal(corev1.ConditionFalse))
	}).WithTimeout(200 * time.Millisecond).Should(Succeed())

	setGate(g, ns, "gated", corev1.ConditionTrue)
	g.Eventually(func(g Gomega) {
		g.Expect(condition(getPod(g, ns, "gated"), corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
	}).Should(Succeed())

	// Each condition has exactly one owner: the gate the operator's, Ready the data plane's.
	p := getPod(g, ns, "gated")
	mine, theirs := statusFields(p, dataplane.DefaultFieldOwner), statusFields(p, "test-operator")
	g.Expect(mine).To(ContainSubstring(`k:{\"type\":\"Ready\"}`))
	g.Expect(mine).NotTo(ContainSubstring(string(gate)))
	g.Expect(theirs).To(ContainSubstring(string(gate)))
	g.Expect(theirs).NotTo(ContainSubstring(`k:{\"type\":\"Ready\"}`))

	setGate(g, ns, "gated", corev1.ConditionFalse)
	g.Eventually(func(g Gomega) {
		g.Expect(condition(getPod(g, ns, "gated"), corev1.PodReady).Status).To(Equal(corev1.ConditionFalse))
	}).Should(Succeed())
	g.Expect(condition(getPod(g, ns, "gated"), gate).Status).To(Equal(corev1.ConditionFalse))
}

func TestInPlaceRestartKeepsUIDAndDropsConnections(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	pod := newPod(ns, "cn-0")
	pod.Annotations = map[string]string{configSuffix: "aaaaaaa"}
	g.Expect(k8s.Create(ctx, pod)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(condition(getPod(g, ns, "cn-0"), corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
	}).Should(Succeed())
	uid := getPod(g, ns, "cn-0").UID

	_ = dp.OpenConnection(ns, "cn-0")
	closeSecond := dp.OpenConnection(ns, "cn-0")
	closeSecond() // closed normally: not dropped
	g.Expect(dp.Connections(ns, "cn-0")).To(Equal(1))

	// An unrelated annotation is not a restart.
	patchAnnotation(g, ns, "cn-0", "example.com/other", "x")
	g.Consistently(func() int32 { return dp.RestartCount(ns, "cn-0") }).WithTimeout(200 * time.Millisecond).Should(BeZero())

	patchAnnotation(g, ns, "cn-0", configSuffix, "bbbbbbb")
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "cn-0")
		g.Expect(p.UID).To(Equal(uid))
		g.Expect(restarts(p)).To(Equal([]int32{1, 1}))
		g.Expect(condition(p, corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
		g.Expect(p.Status.ContainerStatuses[0].LastTerminationState.Terminated).NotTo(BeNil())
	}).Should(Succeed())
	g.Expect(dp.RestartCount(ns, "cn-0")).To(Equal(int32(1)))
	g.Expect(dp.Dropped(ns, "cn-0")).To(Equal(1))
	g.Expect(dp.Connections(ns, "cn-0")).To(BeZero())

	// Ready went False during the restart, then back.
	g.Eventually(func() []string { return details(ns) }).Should(
		ContainElements("Running ready=False restarts=1", "Running ready=True restarts=1"))
}

func patchAnnotation(g Gomega, ns, name, key, value string) {
	p := getPod(g, ns, name)
	base := p.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[key] = value
	g.Expect(k8s.Patch(context.Background(), p, client.MergeFrom(base))).To(Succeed())
}

func TestCrashLoop(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t)
	g.Expect(k8s.Create(context.Background(), newPod(ns, "crashy"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(condition(getPod(g, ns, "crashy"), corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
	}).Should(Succeed())
	_ = dp.OpenConnection(ns, "crashy")

	dp.CrashLoop(ns, "crashy", true)
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "crashy")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(condition(p, corev1.PodReady).Status).To(Equal(corev1.ConditionFalse))
		g.Expect(p.Status.ContainerStatuses[0].State.Waiting).NotTo(BeNil())
		g.Expect(p.Status.ContainerStatuses[0].State.Waiting.Reason).To(Equal("CrashLoopBackOff"))
		g.Expect(p.Status.ContainerStatuses[0].RestartCount).To(BeNumerically(">=", 3))
	}).Should(Succeed())
	g.Expect(dp.Dropped(ns, "crashy")).To(Equal(1))

	dp.CrashLoop(ns, "crashy", false)
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "crashy")
		g.Expect(condition(p, corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
		g.Expect(p.Status.ContainerStatuses[0].State.Running).NotTo(BeNil())
	}).Should(Succeed())
	n := dp.RestartCount(ns, "crashy")
	g.Consistently(func() int32 { return dp.RestartCount(ns, "crashy") }).WithTimeout(200 * time.Millisecond).Should(Equal(n))
}

func TestTerminatingPodStopsAndDropsConnections(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	pod := newPod(ns, "held")
	pod.Finalizers = []string{"ensemble.test/hold"}
	g.Expect(k8s.Create(ctx, pod)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(condition(getPod(g, ns, "held"), corev1.PodReady).Status).To(Equal(corev1.ConditionTrue))
	}).Should(Succeed())
	_ = dp.OpenConnection(ns, "held")

	g.Expect(k8s.Delete(ctx, getPod(g, ns, "held"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "held")
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded))
		g.Expect(condition(p, corev1.PodReady).Status).To(Equal(corev1.ConditionFalse))
		g.Expect(p.Status.ContainerStatuses[0].State.Terminated).NotTo(BeNil())
	}).Should(Succeed())
	g.Expect(dp.Dropped(ns, "held")).To(Equal(1))

	p := getPod(g, ns, "held")
	base := p.DeepCopy()
	p.Finalizers = nil
	g.Expect(k8s.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}))
	}).Should(BeTrue())
}
