package scenarios

import (
	"context"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/internal/recordtb"
	"github.com/ensembletest/ensemble/suite"
)

// The harness's own verdicts under Ginkgo: the suite package tests them over a plain testing.T, whose
// Errorf and Fatalf return; GinkgoT's panic instead, so a failing verdict ends the harness code that gave
// it. These specs give a case a recordtb.TB in its Ginkgo mode, which fails the way GinkgoT does but records
// the failure, so that a spec can observe a failing verdict without failing.

// newVerdictTB makes a recordtb.TB that fails as GinkgoT does, in the running spec (or BeforeAll): its
// context ends with that node, its name is "probe <what>: <the spec's name>" (the case's namespace is named
// after it), and its log lines go to GinkgoT() too.
func newVerdictTB(what string) *recordtb.TB {
	t := GinkgoT()
	return &recordtb.TB{Ctx: t.Context(), TestName: "probe " + what + ": " + t.Name(), Ginkgo: true,
		Log: func(format string, args ...any) { GinkgoT().Logf(format, args...) }}
}

// lines joins a TB's recorded messages, one per line.
func lines(messages []string) string { return strings.Join(messages, "\n") }

// probe runs body on a case of a new verdict TB (named after what), then the case's cleanup as a spec's end
// would, and returns the TB with the harness's verdicts. A recorded failure ends body, as a failing verdict
// ends a spec. The failure dump a failing probe writes is the verdict under test, not a failure of the run:
// it is removed when the spec passes and kept, for reading, when it fails.
func probe(what string, body func(c *suite.Case)) *recordtb.TB {
	p := newVerdictTB(what)
	var c *suite.Case
	p.Run(func() {
		c = s.NewCase(p)
		body(c)
	})
	p.RunCleanups()
	if c != nil {
		dir := c.ArtifactsDir()
		DeferCleanup(func() {
			if !CurrentSpecReport().Failed() {
				Expect(os.RemoveAll(dir)).To(Succeed())
			}
		})
	}
	return p
}

// plainConfigMap is a ConfigMap nothing in the suite reconciles.
func plainConfigMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// createBoth creates the plain ConfigMaps a, then b, in the case.
func createBoth(c *suite.Case, a, b string) func() error {
	return func() error {
		if err := c.Create(plainConfigMap(a)); err != nil {
			return err
		}
		return c.Create(plainConfigMap(b))
	}
}

// noReconciler is the opt-out reason of a probe whose plain ConfigMaps nothing reconciles.
const noReconciler = "plain ConfigMaps, which no controller reconciles: the verdict under test is another one"

var _ = Describe("harness verdicts under Ginkgo", Ordered, ContinueOnFailure, Label("harness"), func() {
	It("a script step fails on a change it does not permit and on a wrong Before order; a failing step does not return into the spec", func() {
		By("one change too many: Step returns it, and the cleanup says the error was dropped")
		var ns string
		var stepErr error
		p := probe("extra", func(c *suite.Case) {
			ns = c.Namespace
			c.OptOut(suite.Convergence, noReconciler)
			stepErr = c.Script("extra").Step("create a and b", createBoth(c, "a", "b"), suite.Permits(suite.Added, "ConfigMap", "a"))
		})
		Expect(stepErr).To(MatchError(MatchRegexp(`a change no permit covers: #\d+ \S+ Added ConfigMap/%s/b `, ns)))
		Expect(lines(p.Fatals())).To(BeEmpty())
		Expect(lines(p.Errors())).To(ContainSubstring(`a step error of script "extra" was dropped`))

		By("a wrong order: RequireStep fails the case there, and the cleanup does not report it again")
		reached := false
		p = probe("order", func(c *suite.Case) {
			c.OptOut(suite.Convergence, noReconciler)
			c.Script("order").RequireStep("a then b", createBoth(c, "a", "b"),
				suite.Before(suite.Permits(suite.Added, "ConfigMap", "b"), suite.Permits(suite.Added, "ConfigMap", "a")))
			reached = true
		})
		Expect(reached).To(BeFalse(), "RequireStep's failure returned into the spec")
		Expect(lines(p.Fatals())).To(And(ContainSubstring("order violated"), ContainSubstring("Added ConfigMap/b must come before Added ConfigMap/a")))
		Expect(lines(p.Errors())).NotTo(ContainSubstring("order violated"))

		By("a malformed step fails the case outright: Step does not go on to return nil")
		reached = false
		p = probe("malformed", func(c *suite.Case) {
			c.OptOut(suite.Convergence, noReconciler)
			_ = c.Script("malformed").Step("permits nothing", nil)
			reached = true
		})
		Expect(reached).To(BeFalse(), "Step returned after failing the case")
		Expect(lines(p.Fatals())).To(ContainSubstring("it permits no change"))
	})

	It("an unfinished script fails the case at its cleanup; a healthy script over the harness's looper passes", func() {
		By("a script never finished")
		var stepErr error
		p := probe("unfinished", func(c *suite.Case) {
			c.OptOut(suite.Convergence, noReconciler)
			stepErr = c.Script("unfinished").Step("create a", func() error { return c.Create(plainConfigMap("a")) },
				suite.Permits(suite.Added, "ConfigMap", "a"))
		})
		Expect(stepErr).NotTo(HaveOccurred())
		Expect(lines(p.Fatals())).To(BeEmpty())
		Expect(lines(p.Errors())).To(ContainSubstring(`script "unfinished" was never finished`))

		By("the looper's ConfigMap created, its loop stopped, the ConfigMap deleted: under GinkgoT itself")
		c := s.NewCase(GinkgoT())
		sc := c.Script("looper")
		// The looper's writes come back to back until its label goes, a few hundred ms: the hot-loop oracle
		// needs 1.5 s of them.
		sc.RequireStep("create a looping ConfigMap", func() error { return c.Create(loopingConfigMap("spin")) },
			suite.Before(suite.Permits(suite.Added, "ConfigMap", "spin"), suite.Permits(suite.Modified, "ConfigMap", "spin", "data.n")))
		// A merge patch carries no resourceVersion, so it never conflicts with the looper's updates.
		sc.RequireStep("stop the loop", func() error {
			cm := plainConfigMap("spin")
			cm.Namespace = c.Namespace
			return c.Client.Patch(context.Background(), cm, client.RawPatch(apitypes.MergePatchType, []byte(`{"metadata":{"labels":{"`+loopLabel+`":"false"}}}`)))
		}, suite.Permits(suite.Modified, "ConfigMap", "spin", "metadata.labels."+loopLabel, "data.n"))
		sc.RequireStep("delete it", func() error { return c.Delete(plainConfigMap("spin")) },
			suite.Permits(suite.Deleted, "ConfigMap", "spin"))
		sc.RequireFinish(500 * time.Millisecond)
	})

	It("the hot-loop oracle flags the harness's looping ConfigMap controller and names it", func() {
		var quietErr error
		var took time.Duration
		p := probe("looper", func(c *suite.Case) {
			c.OptOut(suite.Convergence, "the looper never stops: the hot-loop oracle is the verdict under test")
			Expect(c.Create(loopingConfigMap("spin"))).To(Succeed())
			// A window no pause of the looper can fill: the wait ends at the hot loop, however long a loaded
			// machine makes the looper take to reach its rate.
			took, quietErr = c.Quiescent(5*time.Second, harnessPatience)
		})
		AddReportEntry("looper flagged after", took.Round(time.Millisecond).String())
		Expect(quietErr).To(MatchError(ContainSubstring("oracle hot-loop: ConfigMap/spin was written")), "Quiescent ends at the hot loop")
		Expect(lines(p.Fatals())).To(BeEmpty())
		Expect(lines(p.Errors())).To(And(ContainSubstring("oracle hot-loop: ConfigMap/spin was written"),
			ContainSubstring("harness/looper update"), ContainSubstring("data.n: ")))
	})

	It("the shared-fields oracle names a field two field managers applied, and AllowSharedField accepts that field only", func() {
		apply := func(c *suite.Case, owner string) {
			cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: c.Namespace}, Data: map[string]string{"k": "v", "other": "w"}}
			Expect(c.Client.Patch(context.Background(), cm, client.Apply, client.FieldOwner(owner), client.ForceOwnership)).To(Succeed())
		}
		p := probe("shared", func(c *suite.Case) {
			c.OptOut(suite.Convergence, noReconciler)
			apply(c, "alpha")
			apply(c, "beta")
		})
		Expect(lines(p.Errors())).To(And(ContainSubstring("ConfigMap/shared field data.k is owned by field managers alpha and beta"),
			ContainSubstring("ConfigMap/shared field data.other is owned by field managers alpha and beta")))

		p = probe("shared declared", func(c *suite.Case) {
			c.OptOut(suite.Convergence, noReconciler)
			apply(c, "alpha")
			apply(c, "beta")
			c.AllowSharedField(suite.Objects{Kind: "ConfigMap", Name: "shared"}, "data.k", "both appliers set the same value on purpose")
		})
		Expect(lines(p.Errors())).NotTo(ContainSubstring("field data.k"), "a declared shared field failed the case")
		Expect(lines(p.Errors())).To(ContainSubstring("ConfigMap/shared field data.other is owned by field managers alpha and beta"),
			"AllowSharedField let an undeclared field through")
		Expect(lines(p.Reports())).To(ContainSubstring("shared field allowed: ConfigMap/shared data.k: both appliers set the same value on purpose"))
	})

	// A namespace that never goes quiet fails only at the end of the oracle's 10 s bound: that verdict is
	// tested once, in the suite package (TestPlainTestingT/oracles/convergence), not on every suite run.
	It("the convergence oracle fails a namespace no controller ever reconciled", func() {
		p := probe("never reconciled", func(c *suite.Case) { Expect(c.Create(plainConfigMap("unread"))).To(Succeed()) })
		Expect(lines(p.Errors())).To(And(ContainSubstring("oracle convergence"), ContainSubstring("no controller ever ran a reconcile pass")))
	})

	It("an oracle's opt-out reason is a report entry shown without -v; an opt-out without a reason fails the case", func() {
		c := s.NewCase(GinkgoT())
		const reason = "nothing is created here: the report entry is the point"
		c.OptOut(suite.Convergence, reason)
		var entry *types.ReportEntry
		for _, e := range CurrentSpecReport().ReportEntries {
			if e.Name == "oracle convergence opted out" {
				entry = &e
			}
		}
		Expect(entry).NotTo(BeNil(), "no report entry for the opt-out")
		Expect(entry.Visibility).To(Equal(types.ReportEntryVisibilityAlways))
		Expect(entry.StringRepresentation()).To(Equal(reason))

		for o, want := range map[suite.Oracle]string{suite.Convergence: "without a reason", "nope": "no such oracle"} {
			reached := false
			p := probe("opt-out "+string(o), func(c *suite.Case) {
				c.OptOut(o, " ")
				reached = true
			})
			Expect(reached).To(BeFalse(), "OptOut(%q) returned after failing the case", o)
			Expect(lines(p.Fatals())).To(ContainSubstring(want))
		}
	})
})
