package scenarios

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/matrixone"
	"github.com/ensembletest/ensemble/suite"
)

var (
	// sentinel is the case that holds the sentinel: a running MatrixOne cluster in a namespace no case admits,
	// under its own correctly scoped operator. Every spec of the run must leave it exactly as it was
	// (docs/architecture.md §9). It is made in BeforeSuite, so its cleanup runs after AfterSuite.
	sentinel *suite.Case
	// sentinelNamespace is sentinel.Namespace.
	sentinelNamespace string
	sentinelSpec      = fixtures.MatrixOneSpec{ClaimSetReplicas: 1, ProxySetReplicas: ptr.To[int32](2)}
	// sentinelPrint is the sentinel's fingerprint taken in BeforeSuite, once it was up and quiet.
	sentinelPrint fixtures.Fingerprint
)

// scopedOptions returns the run's MatrixOne options scoped the way the isolation rule says: cache on ns,
// leader-election ID of its own, the given config revision; MO-UNSCOPED-OPERATOR keeps the run's setting
// unless forceScoped.
func scopedOptions(ns, revision string, forceScoped bool) matrixone.Options {
	o := moOptions
	o.Live = map[string]bool{}
	for k, v := range moOptions.Live {
		o.Live[k] = v
	}
	if forceScoped {
		o.Live[matrixone.DefectUnscopedOperator] = false
	}
	o.WatchNamespace, o.LeaderElectionID, o.ConfigRevision = ns, "mo-"+ns, revision
	return o
}

// createMatrixOne creates spec's objects in namespace ns. Errors: the fixture's or the API server's.
func createMatrixOne(ctx context.Context, ns string, spec fixtures.MatrixOneSpec) error {
	objs, err := fixtures.MatrixOne(spec)
	if err != nil {
		return err
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		if err := s.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// startSentinel brings the sentinel up under its own ungated, namespace-scoped manager, holds a client
// connection on each proxy pod, waits until it is quiet and takes its fingerprint.
func startSentinel(ctx context.Context) {
	GinkgoHelper()
	sentinel = s.NewCase(GinkgoT(), suite.Unadmitted())
	sentinelNamespace = sentinel.Namespace
	m, err := s.StartManager(fixtures.MatrixOneManager{Name: "sentinel", HAKeeper: haKeeper, Ungated: true, LeaderElection: true,
		Options: scopedOptions(sentinelNamespace, matrixone.DefaultConfigRevision, true)}.ManagerOptions())
	Expect(err).NotTo(HaveOccurred())
	sentinel.AfterCleanup(func() { Expect(m.Stop()).To(Succeed()) })
	Expect(createMatrixOne(ctx, sentinelNamespace, sentinelSpec)).To(Succeed())
	Eventually(func() error { return fixtures.MatrixOneReady(ctx, s.Client, sentinelNamespace, sentinelSpec) }).
		WithTimeout(time.Minute).WithContext(ctx).Should(Succeed(), "the sentinel cluster never came up")
	for i := 0; i < int(*sentinelSpec.ProxySetReplicas); i++ {
		dp.OpenConnection(sentinelNamespace, matrixone.PodSetPodName(sentinelSpec.Names().ProxySet, i))
	}
	took := sentinel.RequireQuiescent(time.Second, time.Minute)
	sentinelPrint, err = fixtures.TakeFingerprint(ctx, s.Client, dp, sentinelNamespace)
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry("sentinel cluster up and quiet", took.Round(time.Millisecond).String(), ReportEntryVisibilityAlways)
}

// sentinelChanges lists what changed in the sentinel since BeforeSuite; empty when nothing did.
func sentinelChanges(ctx context.Context) []string {
	GinkgoHelper()
	now, err := fixtures.TakeFingerprint(ctx, s.Client, dp, sentinelNamespace)
	Expect(err).NotTo(HaveOccurred())
	return sentinelPrint.Diff(now)
}

// Suite-wide isolation: whatever ran, the sentinel is as BeforeSuite left it.
var _ = AfterSuite(func(ctx SpecContext) {
	if sentinelPrint == nil || s.Interrupted() {
		return // BeforeSuite failed before the sentinel was up, or the run was interrupted: that is the report
	}
	Expect(sentinelChanges(ctx)).To(BeEmpty(), "the sentinel cluster in %s changed during the run", sentinelNamespace)
})
