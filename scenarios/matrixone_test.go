package scenarios

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/matrixone"
	"github.com/ensembletest/ensemble/suite"
)

// operatorInstance starts a MatrixOne operator of its own for the case's (unadmitted) namespace, ungated
// and wired as in production with the given options, and stops it after the case's cleanup.
func operatorInstance(c *suite.Case, name string, opts matrixone.Options) *suite.Manager {
	GinkgoHelper()
	m, err := s.StartManager(fixtures.MatrixOneManager{Name: name, Options: opts, HAKeeper: haKeeper, Ungated: true,
		LeaderElection: true}.ManagerOptions())
	Expect(err).NotTo(HaveOccurred())
	c.AfterCleanup(func() { _ = m.Stop() })
	return m
}

// bringUpMatrixOne creates spec's cluster in the case and waits until it is up and quiet for 500 ms (50 s of
// the operator's time at the fixtures' scale).
func bringUpMatrixOne(ctx context.Context, c *suite.Case, spec fixtures.MatrixOneSpec) {
	GinkgoHelper()
	Expect(createMatrixOne(ctx, c.Namespace, spec)).To(Succeed())
	Eventually(func() error { return fixtures.MatrixOneReady(ctx, s.Client, c.Namespace, spec) }).
		WithTimeout(time.Minute).WithContext(ctx).Should(Succeed())
	c.RequireQuiescent(500*time.Millisecond, time.Minute)
}

var _ = Describe("matrixone", Label("matrixone"), func() {
	It("sentinel isolation: a second operator scoped to its own namespace leaves the sentinel cluster alone", Label("sentinel"), func(ctx SpecContext) {
		c := s.NewCase(GinkgoT(), suite.Unadmitted())
		before, err := fixtures.TakeFingerprint(ctx, s.Client, dp, sentinelNamespace)
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()

		By("starting a second operator, config revision r2, ungated, scoped the way the isolation rule says")
		opts := scopedOptions(c.Namespace, "r2", false)
		m := operatorInstance(c, "mo-second", opts)
		spec := fixtures.MatrixOneSpec{ClaimSetReplicas: 1}
		bringUpMatrixOne(ctx, c, spec)
		ready := time.Since(start)

		By("checking the sentinel")
		after, err := fixtures.TakeFingerprint(ctx, s.Client, dp, sentinelNamespace)
		Expect(err).NotTo(HaveOccurred())
		Expect(before.Diff(after)).To(BeEmpty(), "the second operator changed the sentinel cluster in %s", sentinelNamespace)
		Expect(sentinel.Passes(suite.PassFilter{Manager: m.Name})).To(BeEmpty(),
			"the second operator reconciled objects of the sentinel namespace")
		Expect(sentinel.Writes(suite.WriteFilter{Manager: m.Name, IncludeRejected: true})).To(BeEmpty(),
			"the second operator wrote to the sentinel namespace")
		for i := 0; i < int(*sentinelSpec.ProxySetReplicas); i++ {
			pod := matrixone.PodSetPodName(sentinelSpec.Names().ProxySet, i)
			Expect(dp.Dropped(sentinelNamespace, pod)).To(BeZero(), "the sentinel's client connection on %s was dropped", pod)
		}
		AddReportEntry("second operator's cluster up and quiet in", ready.Round(time.Millisecond).String())
		reportFakes(c)
	})

	It("rolling restart order: a config revision change restarts LogSet, DNSet and ProxySet pods one component after another", Label("pin"), func(ctx SpecContext) {
		c := s.NewCase(GinkgoT(), suite.Unadmitted())
		spec := fixtures.MatrixOneSpec{PoolMaxIdle: ptr.To[int32](0)}
		names := spec.Names()

		By("bringing the cluster up on config revision r1")
		r1 := operatorInstance(c, "mo-r1", scopedOptions(c.Namespace, "r1", true))
		bringUpMatrixOne(ctx, c, spec)
		Expect(r1.Stop()).To(Succeed())

		By("restarting the operator on config revision r2")
		pods := &corev1.PodList{}
		Expect(c.List(pods, client.HasLabels{matrixone.LabelComponent})).To(Succeed())
		var setPods []string
		for _, p := range pods.Items {
			if p.Labels[matrixone.LabelComponent] != matrixone.ComponentCN {
				setPods = append(setPods, p.Name)
			}
		}
		Expect(setPods).To(HaveLen(6), "LogSet x3, DNSet x1 and ProxySet x2 pods")
		start := time.Now()
		operatorInstance(c, "mo-r2", scopedOptions(c.Namespace, "r2", true))
		Eventually(func(g Gomega) {
			for _, p := range setPods {
				g.Expect(dp.RestartCount(c.Namespace, p)).To(BeNumerically(">=", 1), "pod %s not restarted yet", p)
			}
			g.Expect(fixtures.MatrixOneReady(ctx, s.Client, c.Namespace, spec)).To(Succeed())
		}).WithTimeout(time.Minute).WithContext(ctx).Should(Succeed())
		c.RequireQuiescent(500*time.Millisecond, time.Minute)
		AddReportEntry("r2 rolled out and quiet in", time.Since(start).Round(time.Millisecond).String())

		By("every pod restarted exactly once, in place")
		for _, p := range setPods {
			Expect(dp.RestartCount(c.Namespace, p)).To(BeEquivalentTo(1), "pod %s restarted %d times", p, dp.RestartCount(c.Namespace, p))
		}
		windows := restartWindows(c, start, map[string]string{
			names.LogSet: matrixone.ComponentLogSet, names.DNSet: matrixone.ComponentDNSet, names.ProxySet: matrixone.ComponentProxySet})
		AddReportEntry("restart windows (resourceVersions)", fmt.Sprint(windows))
		reportFakes(c)

		c.KnownDefect(matrixone.DefectConcurrentRollingRestart, func() error {
			order := []string{matrixone.ComponentLogSet, matrixone.ComponentDNSet, matrixone.ComponentProxySet}
			for _, comp := range order {
				if _, ok := windows[comp]; !ok {
					return suite.Harness(fmt.Errorf("no restart of a %s pod was observed: %v", comp, windows))
				}
			}
			var overlaps []string
			for i := 0; i < len(order); i++ {
				for j := i + 1; j < len(order); j++ {
					a, b := windows[order[i]], windows[order[j]]
					if a.last > b.first {
						overlaps = append(overlaps, fmt.Sprintf("%s %v overlaps %s %v", order[i], a, order[j], b))
					}
				}
			}
			if len(overlaps) > 0 {
				return fmt.Errorf("components restarted at the same time: %s", strings.Join(overlaps, "; "))
			}
			return nil
		})
	})
})

// window is a component's restart window in resourceVersions: from its first pod's config-suffix change
// to its last pod's return to Ready.
type window struct{ first, last int64 }

func (w window) String() string { return fmt.Sprintf("[%d..%d]", w.first, w.last) }

// restartWindows reads the stream: for each pod of the named sets, the resourceVersion of its config-suffix
// change and of its Ready condition's next False -> True, folded per component.
func restartWindows(c *suite.Case, since time.Time, setComponent map[string]string) map[string]window {
	GinkgoHelper()
	out := map[string]window{}
	suffixAt := map[string]int64{}
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod", Since: since}) {
		comp := ""
		for set, cmp := range setComponent {
			if strings.HasPrefix(ch.Name, set+"-") {
				comp = cmp
			}
		}
		if comp == "" {
			continue
		}
		rv, err := strconv.ParseInt(ch.ResourceVersion, 10, 64)
		Expect(err).NotTo(HaveOccurred())
		for _, f := range ch.Fields {
			switch {
			case f.Path == "metadata.annotations."+matrixone.AnnotationConfigSuffix:
				suffixAt[ch.Name] = rv
				w, ok := out[comp]
				if !ok || rv < w.first {
					w.first = rv
				}
				out[comp] = w
			case f.Path == "status.conditions[type=Ready].status" && f.New == "True" && suffixAt[ch.Name] > 0:
				w := out[comp]
				if rv > w.last {
					w.last = rv
				}
				out[comp] = w
			}
		}
	}
	return out
}

// reportFakes adds the case's HAKeeper calls and pod restarts to the spec's report.
func reportFakes(c *suite.Case) {
	calls := haKeeper.Calls(c.Namespace)
	var parts []string
	for op, n := range calls {
		parts = append(parts, fmt.Sprintf("%s=%d", op, n))
	}
	sort.Strings(parts)
	pods := &corev1.PodList{}
	restarts := 0
	if err := c.List(pods); err == nil {
		for _, p := range pods.Items {
			restarts += int(dp.RestartCount(c.Namespace, p.Name))
		}
	}
	AddReportEntry("HAKeeper calls", strings.Join(parts, " "))
	AddReportEntry("pod restarts", restarts)
}
