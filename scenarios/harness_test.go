package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/ensembletest/ensemble/suite"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// The harness's own verdicts both ways (quiescence, pins, invariants, wrapping) are tested in the suite
// package, with a private test double for the test; these specs check the gate and invariants inside the
// scenario suite, beside the reference operators, and verdict_test.go the script and oracle verdicts under
// Ginkgo.

// loopLabel marks the ConfigMaps the looper rewrites on every pass: a controller that never converges.
const loopLabel = "ensemble.test/loop"

// looper is a test-only controller for the harness self-tests: it bumps data.n of every ConfigMap labelled
// loopLabel=true, and each bump triggers its next pass, forever.
type looper struct{ client.Client }

func (l *looper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := l.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Labels[loopLabel] != "true" || cm.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	n, _ := strconv.Atoi(cm.Data["n"])
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["n"] = strconv.Itoa(n + 1)
	return ctrl.Result{}, client.IgnoreNotFound(l.Update(ctx, cm, client.FieldOwner("looper")))
}

// SetupWithManager sets the looper up the way an operator's main would: a controller named "looper".
func (l *looper) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("looper").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[loopLabel] == "true"
		}))).Complete(l)
}

// harnessManager runs the looper in a gated manager named "harness".
func harnessManager() suite.ManagerOptions {
	return suite.ManagerOptions{Name: "harness", Register: func(_ context.Context, mgr manager.Manager) error {
		return (&looper{Client: mgr.GetClient()}).SetupWithManager(mgr)
	}}
}

func loopingConfigMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{loopLabel: "true"}}}
}

// harnessPatience bounds the harness specs' waits on a condition or on quiescence: a wait returns as soon as
// its condition holds, so the bound only has to outlast a loaded machine (suite.Options.StartTimeout's
// default).
const harnessPatience = time.Minute

var _ = Describe("harness", Label("harness"), func() {
	It("gate refuses a request from a namespace no case admitted", func() {
		c := s.NewCase(GinkgoT(), suite.Unadmitted())
		c.OptOut(suite.Convergence, "the namespace is unadmitted on purpose: no controller may reconcile in it")
		Expect(c.Create(loopingConfigMap("outside"))).To(Succeed())
		Eventually(func() []suite.Pass {
			return c.Passes(suite.PassFilter{Controller: "looper", Gated: true})
		}).ShouldNot(BeEmpty(), "the looper's request for %s never reached the gate", c.Namespace)
		Expect(c.Passes(suite.PassFilter{Manager: "harness"})).To(BeEmpty(), "a request from an unadmitted namespace reached a gated reconciler")
		Expect(c.Writes(suite.WriteFilter{Manager: "harness", IncludeRejected: true})).To(BeEmpty())
		cm := &corev1.ConfigMap{}
		Expect(c.Get("outside", cm)).To(Succeed())
		Expect(cm.Data).NotTo(HaveKey("n"), "the looper wrote to an unadmitted namespace")
	})

	It("quiescence says quiet for a quiet namespace", func() {
		c := s.NewCase(GinkgoT())
		c.OptOut(suite.Convergence, "a ConfigMap no controller acts on: the namespace is quiet without a reconcile pass")
		Expect(c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "still"}, Data: map[string]string{"a": "b"}})).To(Succeed())
		took := c.RequireQuiescent(300*time.Millisecond, harnessPatience)
		AddReportEntry("quiet namespace proven quiet", took.String())
	})

	It("the kubelet stand-in retries a pod binding a perturbation point refused: the pod still runs", func() {
		c := s.NewCase(GinkgoT())
		c.Perturb(perturb.Point{Mode: perturb.Conflict, Writer: "dataplane/dataplane-kubelet", Object: "Pod/solo", Trigger: perturb.Nth(1)})
		Expect(c.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "solo"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}})).To(Succeed())
		Eventually(func() corev1.PodPhase {
			p := &corev1.Pod{}
			_ = c.Get("solo", p)
			return p.Status.Phase
		}).WithTimeout(harnessPatience).Should(Equal(corev1.PodRunning))
		binds := c.Writes(suite.WriteFilter{Name: "solo", Subresource: "binding", IncludeRejected: true})
		Expect(len(binds)).To(BeNumerically(">=", 2), "the refused binding and its retry")
		Expect(binds[0].Err).To(MatchError(ContainSubstring("injected by point conflict@dataplane/dataplane-kubelet:Pod/solo#1")))
		Expect(binds[len(binds)-1].Err).NotTo(HaveOccurred())
	})

	It("the kubelet stand-in retries a pod deletion a perturbation point refused: the pod goes", func() {
		c := s.NewCase(GinkgoT())
		const hold = "ensemble.test/hold"
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{hold}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		Expect(c.Create(pod)).To(Succeed())
		phase := func() corev1.PodPhase {
			p := &corev1.Pod{}
			_ = c.Get("held", p)
			return p.Status.Phase
		}
		Eventually(phase).WithTimeout(harnessPatience).Should(Equal(corev1.PodRunning))
		// Deleted with its finalizer on, the pod is terminated and kept; the kubelet's next write to it is the
		// delete (grace period 0) once the finalizer goes, and the point refuses that one.
		Expect(c.Delete(pod)).To(Succeed())
		Eventually(phase).WithTimeout(harnessPatience).Should(Equal(corev1.PodSucceeded))
		// The kubelet may still be applying the terminated pod's status after its phase shows (three applies
		// came after it once, under -race on a loaded machine, and the point refused one of them instead of
		// the delete): the point is set once the namespace is quiet, so the delete is the next write it counts.
		c.RequireQuiescent(300*time.Millisecond, harnessPatience)
		c.Perturb(perturb.Point{Mode: perturb.Conflict, Writer: "dataplane/dataplane-kubelet", Object: "Pod/held", Trigger: perturb.Nth(1)})
		Expect(c.Update("held", pod, func() { pod.Finalizers = nil })).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(c.Get("held", &corev1.Pod{})) }).
			WithTimeout(harnessPatience).Should(BeTrue(), "the pod is still there, terminating, after its refused delete")
		// A delete is recorded when its response returns, which can be after the pod is seen gone.
		var deletes []suite.Write
		Eventually(func() []suite.Write {
			deletes = c.Writes(suite.WriteFilter{Manager: "dataplane", Controller: "dataplane-kubelet", Name: "held", Verb: suite.VerbDelete, IncludeRejected: true})
			return deletes
		}).WithTimeout(harnessPatience).Should(WithTransform(func(w []suite.Write) int { return len(w) }, BeNumerically(">=", 2)), "the refused delete and its retry")
		Expect(deletes[0].Err).To(MatchError(ContainSubstring("injected by point conflict@dataplane/dataplane-kubelet:Pod/held#1")))
	})

	It("attributes the looper's writes to its controller and pass, under the builder's name", func() {
		c := s.NewCase(GinkgoT())
		Expect(c.Create(loopingConfigMap("spinner"))).To(Succeed())
		Eventually(func() map[string][]string { return c.FieldWriters("ConfigMap", "spinner") }).
			Should(HaveKeyWithValue("data.n", []string{"harness/looper"}))
		for _, w := range c.Writes(suite.WriteFilter{Manager: "harness"}) {
			Expect(w.Controller).To(Equal("looper"))
			Expect(w.Pass).NotTo(BeZero(), "a write of the looper's pass carries no pass")
		}
		Expect(c.Delete(loopingConfigMap("spinner"))).To(Succeed())
	})
})

var _ = Describe("harness invariants", Label("harness"), func() {
	// maxN is an invariant over the case's ConfigMaps: none has data.n above limit.
	maxN := func(limit int) func(context.Context, client.Reader, string) error {
		return func(ctx context.Context, r client.Reader, ns string) error {
			l := &corev1.ConfigMapList{}
			if err := r.List(ctx, l, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, cm := range l.Items {
				if n, _ := strconv.Atoi(cm.Data["n"]); n > limit {
					return fmt.Errorf("ConfigMap %s has n=%d > %d", cm.Name, n, limit)
				}
			}
			return nil
		}
	}

	It("lets a pin take a violation as its evidence, so the case's cleanup does not fail on it again", func() {
		c := s.NewCase(GinkgoT())
		c.OptOut(suite.Convergence, "the looper raises data.n forever: that is the violation the spec takes")
		c.Invariant("n stays at most 3", maxN(3))
		Expect(c.TakeViolation("n stays at most 3")).To(Succeed(), "no violation yet, so nothing to take")
		Expect(c.Create(loopingConfigMap("climber"))).To(Succeed())
		var err error
		Eventually(func() error { err = c.TakeViolation("n stays at most 3"); return err }).Should(HaveOccurred())
		// The predicate reads the live objects after each change, and the looper may have written again by
		// then: the first violation seen is some n above 3, not necessarily 4.
		Expect(err).To(MatchError(MatchRegexp(`ConfigMap climber has n=([4-9]|[1-9][0-9]+) > 3`)))
		Expect(err.Error()).To(ContainSubstring("ConfigMap/"+c.Namespace+"/climber"), "the timeline around the violation is missing")
		c.RequireInvariants() // taken: no longer reported
	})

	It("stays silent while the invariant holds", func() {
		c := s.NewCase(GinkgoT())
		c.OptOut(suite.Convergence, "a ConfigMap no controller acts on: the namespace is quiet without a reconcile pass")
		c.Invariant("n stays at most 3", maxN(3))
		Expect(c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "calm"}, Data: map[string]string{"n": "1"}})).To(Succeed())
		c.RequireQuiescent(300*time.Millisecond, harnessPatience)
		c.RequireInvariants()
	})
})

var _ = Describe("harness garbage collection", Label("harness"), func() {
	It("kube-controller-manager's garbage collector deletes each owner's dependents after it: latency over 20 owners", func(ctx SpecContext) {
		c := s.NewCase(GinkgoT())
		c.OptOut(suite.Convergence, "only kube-controller-manager's garbage collector acts here, and its passes are not recorded")
		const owners, perOwner = 20, 3
		name := func(i int) string { return fmt.Sprintf("owner-%02d", i) }
		ownerOf := map[string]string{} // dependent -> owner
		for i := range owners {
			owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name(i)}}
			Expect(c.Create(owner)).To(Succeed())
			for j := range perOwner {
				dep := fmt.Sprintf("%s-dep-%d", owner.Name, j)
				ownerOf[dep] = owner.Name
				Expect(c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: dep,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}})).To(Succeed())
			}
		}
		Eventually(func() []suite.Change { return c.Changes(suite.ChangeFilter{Kind: "ConfigMap", Type: suite.Added}) }).
			WithContext(ctx).Should(HaveLen(owners * (1 + perOwner)))

		// Owners are deleted one at a time; a latency is from the owner's Deleted change to its last dependent's,
		// both as the event stream saw them.
		var latencies []time.Duration
		for i := range owners {
			Expect(c.Delete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name(i)}})).To(Succeed())
			var owner suite.Change
			var deps []suite.Change
			Eventually(func(g Gomega) {
				deps = nil
				for _, ch := range c.Changes(suite.ChangeFilter{Kind: "ConfigMap", Type: suite.Deleted}) {
					switch {
					case ch.Name == name(i):
						owner = ch
					case ownerOf[ch.Name] == name(i):
						deps = append(deps, ch)
					}
				}
				g.Expect(owner.Name).To(Equal(name(i)), "owner %s not gone yet", name(i))
				g.Expect(deps).To(HaveLen(perOwner), "dependents of %s gone", name(i))
			}).WithTimeout(harnessPatience).WithPolling(5 * time.Millisecond).WithContext(ctx).Should(Succeed())
			last := owner
			for _, d := range deps {
				Expect(rv(d)).To(BeNumerically(">", rv(owner)), "%s was deleted before its owner", d.Name)
				if d.Time.After(last.Time) {
					last = d
				}
			}
			latencies = append(latencies, last.Time.Sub(owner.Time))
		}
		median, worst := medianMax(latencies)
		AddReportEntry("garbage collection", fmt.Sprintf("gc latency median %s max %s over %d", median.Round(time.Millisecond),
			worst.Round(time.Millisecond), owners), ReportEntryVisibilityAlways)
		// The latency is a reported figure: a loaded machine stretches it, and the wait above already fails a
		// collector that never collects.
		c.RequireQuiescent(300*time.Millisecond, harnessPatience)
	})
})
