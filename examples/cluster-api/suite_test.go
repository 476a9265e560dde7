package clusterapi_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	clusterapi "github.com/ensembletest/ensemble/examples/cluster-api"
	"github.com/ensembletest/ensemble/suite"
)

// s is the suite every spec runs in: one envtest (also the workload cluster), cluster-api's core controllers
// and webhooks, its CRD migrator and the fake infrastructure provider.
var s *suite.Suite

// TestClusterAPI runs the Ginkgo suite of cluster-api's core controllers under ensemble.
func TestClusterAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	// suite.Runs lets ensemble explore run several points of a spec in this one process.
	cfg, rep := GinkgoConfiguration()
	if n := suite.Runs(); n > 1 {
		cfg.MustPassRepeatedly = n
	}
	RunSpecs(t, "ensemble: cluster-api "+clusterapi.Version, cfg, rep)
}

// noPins is the defect catalog: no cluster-api defect is pinned, so every KnownDefect reference is unknown.
type noPins map[string]string

// Lookup returns the title of the catalogued defect ref.
func (p noPins) Lookup(ref string) (string, bool) {
	title, ok := p[ref]
	return title, ok
}

var _ = BeforeSuite(func(ctx SpecContext) {
	scheme, err := clusterapi.Scheme()
	Expect(err).NotTo(HaveOccurred())
	crds, err := clusterapi.CRDPath()
	Expect(err).NotTo(HaveOccurred())
	hooks, err := clusterapi.WebhookPath()
	Expect(err).NotTo(HaveOccurred())
	s, err = suite.Boot(ctx, suite.Options{
		Scheme:            scheme,
		CRDDirectoryPaths: []string{crds},
		CRDs:              clusterapi.FakeInfraCRDs(),
		Webhooks:          suite.WebhookOptions{Paths: []string{hooks}},
		WatchKinds: []client.Object{&clusterv1.Cluster{}, &clusterv1.MachineDeployment{}, &clusterv1.MachineSet{},
			&clusterv1.Machine{}, &clusterv1.MachineHealthCheck{}, &clusterapi.FakeCluster{}, &clusterapi.FakeMachine{},
			&clusterapi.FakeMachineTemplate{}, &corev1.Secret{}, &corev1.Node{}},
		Pins: noPins{},
		Managers: []suite.ManagerOptions{clusterapi.ManagerOptions(scheme), clusterapi.FakeInfraManagerOptions(),
			clusterapi.CRDMigratorManagerOptions()},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(s.Stop()).To(Succeed()) })
	AddReportEntry("envtest boot", s.EnvtestBoot.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)
	AddReportEntry("suite ready", s.Ready.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)

	// The CRD migrator marks each cluster-api CRD it migrated with the generation it observed.
	start := time.Now()
	var migrated []string
	Eventually(func(g Gomega) {
		list := &apiextensionsv1.CustomResourceDefinitionList{}
		g.Expect(s.Client.List(ctx, list)).To(Succeed())
		migrated = nil
		for _, crd := range list.Items {
			// ClusterClasses are migrated only with the ClusterTopology feature gate, off by default (core/main.go).
			if crd.Spec.Group != clusterv1.GroupVersion.Group || crd.Spec.Names.Kind == "ClusterClass" {
				continue
			}
			g.Expect(crd.Annotations).To(HaveKey(clusterv1.CRDMigrationObservedGenerationAnnotation), "CRD %s", crd.Name)
			migrated = append(migrated, crd.Name)
		}
		g.Expect(migrated).NotTo(BeEmpty())
	}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	sort.Strings(migrated)
	AddReportEntry("CRD migrator", fmt.Sprintf("%d cluster.x-k8s.io CRDs migrated within %s of ready: %s", len(migrated),
		time.Since(start).Round(time.Millisecond), strings.Join(migrated, ", ")), ReportEntryVisibilityAlways)
}, NodeTimeout(3*time.Minute))

// totals counts the passes and writes of every spec per writer, for the report after the suite.
var totals = struct {
	sync.Mutex
	passes, writes map[string]int
}{passes: map[string]int{}, writes: map[string]int{}}

var _ = AfterSuite(func() {
	totals.Lock()
	defer totals.Unlock()
	if len(totals.passes) == 0 {
		return // no spec got as far as its report: their own failures say why
	}
	AddReportEntry("passes per controller (all specs)", counts(totals.passes), ReportEntryVisibilityAlways)
	AddReportEntry("writes per writer (all specs)", counts(totals.writes), ReportEntryVisibilityAlways)
	// Only the whole suite runs every controller: a focused or filtered run (make explore runs one spec) may
	// leave the MachineHealthCheck's out.
	if sc, _ := GinkgoConfiguration(); len(sc.FocusStrings)+len(sc.FocusFiles) > 0 || sc.LabelFilter != "" {
		return
	}
	for _, ctl := range append(slices.Clone(clusterapi.Controllers), "fakecluster", "fakemachine") {
		m := clusterapi.ManagerName
		if strings.HasPrefix(ctl, "fake") {
			m = clusterapi.FakeInfraManagerName
		}
		Expect(totals.passes).To(HaveKeyWithValue(m+"/"+ctl, BeNumerically(">", 0)), "controller %s/%s ran no pass in any spec", m, ctl)
	}
})

// counts renders m as "key=n" lines, sorted.
func counts(m map[string]int) string {
	lines := make([]string, 0, len(m))
	for k, n := range m {
		lines = append(lines, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
