package kueue_test

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/ensembletest/ensemble/examples/kueue"
	"github.com/ensembletest/ensemble/fakes/dataplane"
	"github.com/ensembletest/ensemble/suite"
)

// s is the suite every spec runs in: one envtest, Kueue (controllers, webhooks, scheduler) and the kubelet fake.
var s *suite.Suite

// TestKueue runs the Ginkgo suite of Kueue under ensemble.
func TestKueue(t *testing.T) {
	RegisterFailHandler(Fail)
	// suite.Runs lets ensemble explore run several points of a spec in this one process.
	cfg, rep := GinkgoConfiguration()
	if n := suite.Runs(); n > 1 {
		cfg.MustPassRepeatedly = n
	}
	RunSpecs(t, "ensemble: Kueue v0.17.0", cfg, rep)
}

// noPins is the defect catalog: no Kueue defect is pinned, so every KnownDefect reference is unknown.
type noPins map[string]string

// Lookup returns the title of the catalogued defect ref.
func (p noPins) Lookup(ref string) (string, bool) {
	title, ok := p[ref]
	return title, ok
}

var _ = BeforeSuite(func(ctx SpecContext) {
	scheme, err := kueue.Scheme()
	Expect(err).NotTo(HaveOccurred())
	crds, err := kueue.CRDPath()
	Expect(err).NotTo(HaveOccurred())
	webhooks, err := kueue.Webhooks()
	Expect(err).NotTo(HaveOccurred())
	opts, cfg, err := kueue.Load(scheme)
	Expect(err).NotTo(HaveOccurred())
	dp := dataplane.New(dataplane.Options{}) // the kubelet; the real Job controller runs in kube-controller-manager
	s, err = suite.Boot(ctx, suite.Options{
		Scheme:            scheme,
		CRDDirectoryPaths: []string{crds},
		Webhooks:          webhooks,
		WatchKinds: []client.Object{&kueueapi.ResourceFlavor{}, &kueueapi.ClusterQueue{}, &kueueapi.LocalQueue{},
			&kueueapi.Workload{}, &kueueapi.WorkloadPriorityClass{}, &batchv1.Job{}, &corev1.Pod{}},
		Pins:     noPins{},
		Managers: []suite.ManagerOptions{dp.ManagerOptions(), kueue.ManagerOptions("kueue", opts, cfg)},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(s.Stop()).To(Succeed()) })
	AddReportEntry("envtest boot", s.EnvtestBoot.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)
	AddReportEntry("suite ready", s.Ready.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)
}, NodeTimeout(3*time.Minute))
