package scenarios

import (
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/suite"
)

// Leader election: two instances of one operator on one Lease, as a Deployment of two replicas runs them.
// Exactly one may lead; the other's controllers must not run, so it writes nothing; once the leader stops
// (and releases the Lease) the other leads and carries on alone.

// leaderLease is the Lease both instances of the leader spec compete for, in the case's namespace.
const leaderLease = "multigres-leader"

// leaderInstance starts a Multigres operator instance of its own, ungated and scoped to the case's
// (unadmitted) namespace, competing for leaderLease there, and stops it after the case's cleanup.
func leaderInstance(c *suite.Case, name string) *suite.Manager {
	GinkgoHelper()
	mo := fixtures.MultigresManager(name, mgOptions, topology)
	mo.Ungated = true
	mo.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{c.Namespace: {}}}
	mo.LeaderElection, mo.LeaderElectionID, mo.LeaderElectionNamespace = true, leaderLease, c.Namespace
	m, err := s.StartManager(mo)
	Expect(err).NotTo(HaveOccurred())
	c.AfterCleanup(func() { Expect(m.Stop()).To(Succeed()) })
	return m
}

// elected returns the names of the managers among ms that lead now.
func elected(ms ...*suite.Manager) []string {
	var out []string
	for _, m := range ms {
		select {
		case <-m.Elected():
			out = append(out, m.Name)
		default:
		}
	}
	return out
}

// writers returns the names of the managers among ms that wrote in the case since t, leader election aside.
func writers(c *suite.Case, since time.Time, ms ...*suite.Manager) []string {
	var out []string
	for _, m := range ms {
		for _, w := range c.Writes(suite.WriteFilter{Manager: m.Name, Since: since, IncludeRejected: true}) {
			// A follower's leader election tries the Lease, and a stopping leader's event broadcaster still
			// sends its "stopped leading" Event: neither is the operator writing.
			if w.Controller != suite.LeaderElection && (w.Kind != "Event" || !strings.HasPrefix(w.Name, leaderLease+".")) {
				out = append(out, m.Name)
				break
			}
		}
	}
	return out
}

// leaderWindow is the shortest time the leader spec watches for exactly one leader before it stops the leader.
const leaderWindow = time.Second

// watchLeaders samples elected(ms...) every 10 ms from now until the returned stop is called. stop returns how
// long it watched and the first sample in which more than one of ms led, or none in the first leaderWindow
// ("" when there was none). Later on, none leading is a restart point's stop of the leader until its successor
// instance is elected, not two leaders. stop may be called again (a DeferCleanup ends the sampling of a spec
// that failed before it stopped the watch); it then returns what the first call did.
func watchLeaders(ms ...*suite.Manager) (stop func() (watched time.Duration, violation string)) {
	start := time.Now()
	quit, done := make(chan struct{}), make(chan struct{})
	var (
		violation string
		watched   time.Duration
		once      sync.Once
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			l, since := elected(ms...), time.Since(start)
			if violation == "" && (len(l) > 1 || (len(l) == 0 && since < leaderWindow)) {
				violation = fmt.Sprintf("%d led %s after the first election: %v", len(l), since.Round(time.Millisecond), l)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() (time.Duration, string) {
		once.Do(func() {
			close(quit)
			<-done
			watched = time.Since(start)
		})
		return watched, violation
	}
}

var _ = Describe("multigres leader election", Label("multigres"), func() {
	It("two instances on one Lease: exactly one leads and writes; once it stops the other leads and carries out a scale alone", leaderSpec)
})

// leaderSpec starts multigres-a and multigres-b on one Lease, checks that one leads and alone brings a
// cluster up, stops it, and checks that the other takes over and alone scales the pool 2 -> 1 (drain,
// topology and pod deletion). A scale-down, not up: the pooler of a new pod can be pruned by a shard pass
// whose cache has not seen the pod yet, a race of the operator's own that this spec is not about.
func leaderSpec() {
	c := s.NewCase(GinkgoT(), suite.Unadmitted())
	spec := fixtures.MultigresSpec{}
	start := time.Now()
	a, b := leaderInstance(c, "multigres-a"), leaderInstance(c, "multigres-b")

	By("exactly one instance leads")
	Eventually(func() []string { return elected(a, b) }).WithTimeout(10*time.Second).ShouldNot(BeEmpty(), "neither instance acquired the Lease")
	// Exactly one leads from the first election until the leader is stopped, sampled while it brings the cluster
	// up rather than in a window of its own, and for at least leaderWindow.
	stopWatch := watchLeaders(a, b)
	DeferCleanup(func() { stopWatch() })
	leader, follower := a, b
	if elected(a, b)[0] == b.Name {
		leader, follower = b, a
	}
	AddReportEntry("first leader", leader.Name)

	By("the leader alone brings the cluster up")
	bringUpHealthy(c, spec)
	c.RequireQuiescent(500*time.Millisecond, 30*time.Second)
	watched, violation := stopWatch()
	Expect(violation).To(BeEmpty(), "not exactly one instance on Lease %s led", leaderLease)
	if watched < leaderWindow {
		Consistently(func() []string { return elected(a, b) }).WithTimeout(leaderWindow-watched).Should(HaveLen(1), "both instances on Lease %s lead", leaderLease)
	}
	Expect(writers(c, start, a, b)).To(Equal([]string{leader.Name}), "writers while %s leads", leader.Name)
	Expect(c.Passes(suite.PassFilter{Manager: follower.Name})).To(BeEmpty(), "the follower %s reconciled", follower.Name)

	By("stopping the leader: the follower takes over")
	Expect(leader.Stop()).To(Succeed())
	stopped := time.Now()
	Eventually(follower.Elected()).WithTimeout(10*time.Second).Should(BeClosed(), "%s never took over from %s", follower.Name, leader.Name)
	AddReportEntry("takeover after the leader's Stop", time.Since(stopped).Round(time.Millisecond).String())

	By("the new leader alone scales the pool 2 -> 1")
	scalePool(c, spec, "main", 1)
	Expect(writers(c, stopped, a, b)).To(Equal([]string{follower.Name}), "writers after %s stopped", leader.Name)
}
