// Package scenarios is ensemble's scenario tier: one Ginkgo suite, one file per joint between controllers.
// BeforeSuite boots envtest once with every reconciler of the Multigres reference operator, the data-plane
// simulator, the pooler simulator and the harness's own test controllers; each spec works in its own
// namespace through a suite.Case.
package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fakes/dataplane"
	fakehk "github.com/ensembletest/ensemble/fakes/hakeeperfake"
	"github.com/ensembletest/ensemble/fakes/pooler"
	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/matrixone"
	"github.com/ensembletest/ensemble/operators/multigres"
	"github.com/ensembletest/ensemble/pins"
	"github.com/ensembletest/ensemble/suite"
)

var (
	// s is the suite every spec runs in.
	s *suite.Suite
	// dp, topology and haKeeper are the fakes, for specs that steer them (Hold/Release, sessions) or read
	// their logs.
	dp       *dataplane.DataPlane
	topology *pooler.Store
	haKeeper *fakehk.Registry
	// mgOptions and moOptions are the operators' options in this run (catalog defaults + ENSEMBLE_DEFECTS;
	// MatrixOne's durations scaled by fixtures.TimeScale).
	mgOptions multigres.Options
	moOptions matrixone.Options
)

func TestScenarios(t *testing.T) {
	RegisterFailHandler(Fail)
	// suite.Runs lets ensemble explore run several points of a spec in this one process.
	cfg, rep := GinkgoConfiguration()
	if n := suite.Runs(); n > 1 {
		cfg.MustPassRepeatedly = n
	}
	RunSpecs(t, "ensemble scenarios", cfg, rep)
}

var _ = BeforeSuite(func(ctx SpecContext) {
	scheme, err := fixtures.Scheme()
	Expect(err).NotTo(HaveOccurred())
	mgOptions, err = fixtures.MultigresOptions()
	Expect(err).NotTo(HaveOccurred())
	moOptions, err = fixtures.MatrixOneOptions()
	Expect(err).NotTo(HaveOccurred())
	dp = dataplane.New(dataplane.Options{RestartAnnotations: []string{matrixone.AnnotationConfigSuffix}})
	topology = pooler.New(pooler.Options{})
	haKeeper = fakehk.New(fakehk.Options{})

	s, err = suite.Boot(ctx, suite.Options{
		Scheme:            scheme,
		CRDDirectoryPaths: []string{fixtures.MultigresCRDs, fixtures.MatrixOneCRDs},
		WatchKinds:        watchKinds(),
		Pins:              pins.Default,
		Dumpers:           fixtures.FakeLogs(dp, topology, haKeeper),
		Externals:         fixtures.Externals(topology, haKeeper),
		Managers: []suite.ManagerOptions{
			dp.ManagerOptions(),
			fixtures.PoolerManager(topology),
			fixtures.HAKeeperManager(haKeeper),
			fixtures.MultigresManager("multigres", mgOptions, topology),
			fixtures.MatrixOneManager{Name: "matrixone", Options: moOptions, HAKeeper: haKeeper}.ManagerOptions(),
			harnessManager(),
		},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(s.Stop()).To(Succeed()) })
	Expect(createStorageClass(ctx, fixtures.StandardStorageClass)).To(Succeed())
	startSentinel(ctx)
	AddReportEntry("envtest boot", s.EnvtestBoot.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)
	AddReportEntry("suite ready (managers started, caches synced)", s.Ready.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)
}, NodeTimeout(3*time.Minute))

// A label filter that selects no spec (a typo in -ginkgo.label-filter or make's LABELS) fails the run and
// names the labels there are: without it, go test passes with "0 of 36 specs", say.
var _ = ReportAfterSuite("label filter selects a spec", func(r Report) {
	filter := r.SuiteConfig.LabelFilter
	if filter == "" {
		return
	}
	ran, labels := 0, map[string]bool{}
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt {
			continue
		}
		for _, l := range sr.Labels() {
			labels[l] = true
		}
		if sr.State != types.SpecStateSkipped {
			ran++
		}
	}
	if ran == 0 {
		Fail(fmt.Sprintf("label filter %q selected no spec: the suite's labels are %s", filter, strings.Join(slices.Sorted(maps.Keys(labels)), ", ")))
	}
})

// The run's summary, printed whether or not Ginkgo is verbose (go test shows it with -v, as make test-suite
// runs it): each live pin's "still present" line and each spec's opted-out oracles and declared shared fields,
// so a passing run still says which defects it carries and which checks it skipped.
var _ = ReportAfterSuite("pins and opted-out oracles", func(r Report) {
	var pinLines, optLines []string
	for _, sr := range r.SpecReports {
		for _, e := range sr.ReportEntries {
			switch {
			case strings.HasPrefix(e.Name, "KnownDefect "):
				pinLines = append(pinLines, "  "+e.StringRepresentation())
			case strings.HasPrefix(e.Name, "oracle ") || e.Name == "shared field allowed":
				optLines = append(optLines, fmt.Sprintf("  %s: %s: %s", sr.FullText(), e.Name, e.StringRepresentation()))
			}
		}
	}
	fmt.Printf("\nlive pins (%d):\n%s\nopted-out oracles (%d):\n%s\n", len(pinLines), strings.Join(pinLines, "\n"), len(optLines), strings.Join(optLines, "\n"))
})

// watchKinds are the kinds of both reference operators, without duplicates (Pods are in both).
func watchKinds() []client.Object {
	seen := map[string]bool{}
	var out []client.Object
	for _, k := range append(fixtures.MultigresWatchKinds(), fixtures.MatrixOneWatchKinds()...) {
		if t := fmt.Sprintf("%T", k); !seen[t] {
			seen[t] = true
			out = append(out, k)
		}
	}
	return out
}

// createStorageClass creates a cluster-scoped StorageClass (AlreadyExists is fine).
func createStorageClass(ctx context.Context, name string) error {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "ensemble.test/none"}
	if err := s.Client.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
