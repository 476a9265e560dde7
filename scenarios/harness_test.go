package scenarios

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/ensembletest/ensemble/pins"
	"github.com/ensembletest/ensemble/suite"
)

// loopLabel marks the ConfigMaps the looper rewrites on every pass: a controller that never converges.
const loopLabel = "ensemble.test/loop"

// looper is a test-only controller for the harness self-tests: it bumps data.n of every ConfigMap labelled
// loopLabel=true, and each bump triggers its next pass, forever.
type looper struct{ Client client.Client }

func (l *looper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := l.Client.Get(ctx, req.NamespacedName, cm); err != nil {
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
	return ctrl.Result{}, client.IgnoreNotFound(l.Client.Update(ctx, cm, client.FieldOwner("looper")))
}

// harnessManager runs the looper in a gated manager named "harness".
func harnessManager() suite.ManagerOptions {
	return suite.ManagerOptions{Name: "harness", Register: func(mgr manager.Manager, w suite.Wiring) error {
		l := &looper{Client: w.Client("looper")}
		return ctrl.NewControllerManagedBy(mgr).Named("looper").
			For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetLabels()[loopLabel] == "true"
			}))).Complete(w.Reconciler("looper", l))
	}}
}

func loopingConfigMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{loopLabel: "true"}}}
}

var _ = Describe("harness", Label("harness"), func() {
	It("gate refuses a request from a namespace no case admitted", func(ctx SpecContext) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-unadmitted-"}}
		Expect(s.Client.Create(ctx, ns)).To(Succeed())
		cm := loopingConfigMap("outside")
		cm.Namespace = ns.Name
		Expect(s.Client.Create(ctx, cm)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(s.Client.Delete(ctx, cm)).To(Succeed()) })

		gated := true
		Eventually(func() []suite.Pass {
			return s.Recorder().Passes(suite.PassFilter{Namespace: ns.Name, Controller: "looper", Gated: &gated})
		}).WithContext(ctx).ShouldNot(BeEmpty(), "the looper's request for %s never reached the gate", ns.Name)
		real := false
		Expect(s.Recorder().Passes(suite.PassFilter{Namespace: ns.Name, Manager: "harness", Gated: &real})).To(BeEmpty(), "a request from an unadmitted namespace reached a gated reconciler")
		Expect(s.Recorder().Writes(suite.WriteFilter{Namespace: ns.Name, Manager: "harness"})).To(BeEmpty())
		Expect(s.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		Expect(cm.Data).NotTo(HaveKey("n"), "the looper wrote to an unadmitted namespace")
	})

	It("quiescence says quiet for a quiet namespace", func() {
		c := s.NewCase(GinkgoT())
		Expect(c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "still"}, Data: map[string]string{"a": "b"}})).To(Succeed())
		took := c.RequireQuiescent(300*time.Millisecond, 10*time.Second)
		AddReportEntry("quiet namespace proven quiet", took.String())
	})

	It("quiescence says not quiet for a looping namespace and names the looping object", func(ctx SpecContext) {
		c := s.NewCase(GinkgoT())
		Expect(c.Create(loopingConfigMap("spinner"))).To(Succeed())
		_, err := s.WaitQuiescent(ctx, c.Namespace, 300*time.Millisecond, 2*time.Second)
		Expect(err).To(MatchError(suite.ErrNotQuiet))
		Expect(err.Error()).To(ContainSubstring("ConfigMap/spinner"), "the report does not name the looping object")
		Expect(err.Error()).To(ContainSubstring("data.n"), "the report does not name the looping field")
		Expect(err.Error()).To(ContainSubstring("harness/looper update"), "the report does not name the writer")
	})

	Describe("KnownDefect", func() {
		It("passes and reports while the check errors", func() {
			p := &suite.ProbeTB{TestName: "pin"}
			suite.KnownDefect(p, pins.Default, "MG-CONDITION-MAP-ORDER", func() error { return errors.New("message flapped") })
			Expect(p.Failed()).To(BeFalse(), "a pin whose defect is present failed: %v", p.Fatals)
			Expect(p.Reports).To(ConsistOf(ContainSubstring("MG-CONDITION-MAP-ORDER still present: message flapped")))
		})
		It("fails with the appears-fixed message when the check returns nil", func() {
			p := &suite.ProbeTB{TestName: "pin"}
			suite.KnownDefect(p, pins.Default, "MG-CONDITION-MAP-ORDER", func() error { return nil })
			Expect(p.Fatals).To(ConsistOf(ContainSubstring("MG-CONDITION-MAP-ORDER appears fixed: replace this pin with a positive assertion")))
		})
		It("fails on an empty or unknown reference and on a harness error", func() {
			for ref, want := range map[string]string{"": "empty reference", "MG-NOPE": "no such defect"} {
				p := &suite.ProbeTB{}
				suite.KnownDefect(p, pins.Default, ref, func() error { return errors.New("x") })
				Expect(strings.Join(p.Fatals, "\n")).To(ContainSubstring(want))
			}
			p := &suite.ProbeTB{}
			suite.KnownDefect(p, pins.Default, "MG-CONDITION-MAP-ORDER", func() error { return suite.Harness(context.DeadlineExceeded) })
			Expect(p.Failed()).To(BeTrue(), "a harness error kept a pin green")
		})
	})
})

var _ = Describe("harness invariants", Label("harness"), func() {
	// maxN is an invariant over the case's ConfigMaps: none has data.n above limit.
	maxN := func(limit int) suite.InvariantFunc {
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

	It("reports the first violation with the changes around it", func() {
		p := &suite.ProbeTB{TestName: "invariant-violated"}
		c := s.NewCase(p)
		DeferCleanup(p.RunCleanups)
		c.Invariant("n stays at most 3", maxN(3))
		Expect(c.Create(loopingConfigMap("climber"))).To(Succeed())
		Eventually(c.InvariantsHold).Should(MatchError(ContainSubstring(`invariant "n stays at most 3" violated`)))
		err := c.InvariantsHold()
		Expect(err.Error()).To(ContainSubstring("ConfigMap climber has n=4 > 3"), "the first violation is not the one reported")
		Expect(err.Error()).To(ContainSubstring("ConfigMap/"+c.Namespace+"/climber"), "the timeline around the violation is missing")
		// Taken, so the probe case's cleanup neither fails nor writes a failure dump for this expected violation.
		Expect(c.TakeViolation("n stays at most 3")).To(HaveOccurred())
	})

	It("lets a pin take a violation as its evidence, so the case's cleanup does not fail on it again", func() {
		c := s.NewCase(GinkgoT())
		c.Invariant("n stays at most 3", maxN(3))
		Expect(c.TakeViolation("n stays at most 3")).To(Succeed(), "no violation yet, so nothing to take")
		Expect(c.Create(loopingConfigMap("climber"))).To(Succeed())
		Eventually(c.InvariantsHold).Should(HaveOccurred())
		var v *suite.Violation
		Expect(errors.As(c.TakeViolation("n stays at most 3"), &v)).To(BeTrue())
		Expect(v.Err).To(MatchError(ContainSubstring("n=4 > 3")))
		Expect(c.InvariantsHold()).To(Succeed(), "a taken violation is still reported")
		Expect(c.TakeViolation("no such invariant")).To(MatchError(suite.ErrHarness))
	})

	It("stays silent while the invariant holds", func() {
		c := s.NewCase(GinkgoT())
		c.Invariant("n stays at most 3", maxN(3))
		Expect(c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "calm"}, Data: map[string]string{"n": "1"}})).To(Succeed())
		c.RequireQuiescent(300*time.Millisecond, 10*time.Second)
		c.RequireInvariants()
	})
})
