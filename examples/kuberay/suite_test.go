package kuberay_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	"github.com/ensembletest/ensemble/examples/kuberay"
	"github.com/ensembletest/ensemble/fakes/dataplane"
	"github.com/ensembletest/ensemble/suite"
)

// s is the suite every spec runs in: one envtest, KubeRay's three reconcilers and the data-plane fake.
var s *suite.Suite

// TestKubeRay runs the Ginkgo suite of KubeRay's reconcilers under ensemble.
func TestKubeRay(t *testing.T) {
	RegisterFailHandler(Fail)
	// suite.Runs lets ensemble explore run several points of a spec in this one process.
	cfg, rep := GinkgoConfiguration()
	if n := suite.Runs(); n > 1 {
		cfg.MustPassRepeatedly = n
	}
	RunSpecs(t, "ensemble: KubeRay ray-operator "+kuberay.Version, cfg, rep)
}

// noPins is the defect catalog: no KubeRay defect is pinned, so every KnownDefect reference is unknown.
type noPins map[string]string

// Lookup returns the title of the catalogued defect ref.
func (p noPins) Lookup(ref string) (string, bool) {
	title, ok := p[ref]
	return title, ok
}

var _ = BeforeSuite(func(ctx SpecContext) {
	scheme, err := kuberay.Scheme()
	Expect(err).NotTo(HaveOccurred())
	crds, err := kuberay.CRDPath()
	Expect(err).NotTo(HaveOccurred())
	dp := dataplane.New(dataplane.Options{}) // the kubelet; the real controllers run in kube-controller-manager
	s, err = suite.Boot(ctx, suite.Options{
		Scheme:            scheme,
		CRDDirectoryPaths: []string{crds},
		WatchKinds: []client.Object{&rayv1.RayCluster{}, &rayv1.RayJob{}, &rayv1.RayService{},
			&corev1.Pod{}, &corev1.Service{}, &batchv1.Job{}, &appsv1.Deployment{}, &appsv1.ReplicaSet{}},
		Pins: noPins{},
		Managers: []suite.ManagerOptions{dp.ManagerOptions(), {Name: "kuberay",
			Register: func(ctx context.Context, mgr manager.Manager) error { return kuberay.Setup(ctx, mgr) }}},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(s.Stop()).To(Succeed()) })
	AddReportEntry("envtest boot", s.EnvtestBoot.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)
	AddReportEntry("suite ready", s.Ready.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)
}, NodeTimeout(3*time.Minute))
