package scenarios

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	"github.com/ensembletest/ensemble/pins"
	"github.com/ensembletest/ensemble/suite"
)

// StorageClassValid written by two checks: with MG-STORAGECLASS-SPLIT-WRITERS live the backup check writes
// the condition with its own verdict, and the pool check, later in the same pass, overwrites it with its own.
// With the backup class present and a pool class missing the two verdicts differ, so the message alternates
// forever. The suite's shared multigres manager runs the defect fixed (its catalog default), so no other spec
// meets it; the pin runs a multigres instance of its own, scoped to its case's namespace, in the state
// pins.Default.PinState gives it: live, and fixed under ENSEMBLE_DEFECTS=MG-STORAGECLASS-SPLIT-WRITERS=live
// (the defect matrix's flip, which then turns the shared manager live).
//
// Live or fixed, a pass that is done must leave the condition telling the truth: a pool class is missing, so
// StorageClassValid is False and names it. The defect's wrong verdict lives only inside a pass.

var _ = Describe("multigres", Label("multigres"), func() {
	It("pins MG-STORAGECLASS-SPLIT-WRITERS: backup class present, pool class missing: StorageClassValid alternates between the checks' messages, yet each pass leaves it False (up to 4 s: 40 passes)", Label("pin"), splitWritersPinSpec)
})

// splitWritersManager is the name of the pin's own multigres manager.
const splitWritersManager = "mg-split-writers"

// splitWritersPinSpec brings up a cluster whose backup StorageClass exists and whose pool's does not, under
// a multigres instance of its own, and watches StorageClassValid over 40 shard passes: with the defect it
// takes the backup check's message and the pool check's in turn; fixed, it keeps one verdict. Either way each
// pass that wrote the condition left it False naming the missing pool class.
func splitWritersPinSpec() {
	c := s.NewCase(GinkgoT(), suite.Unadmitted())
	st, err := pins.Default.PinState(multigres.DefectStorageClassSplitWriters)
	Expect(err).NotTo(HaveOccurred())
	live := st == pins.Live
	if live {
		c.OptOut(suite.HotLoop, "MG-STORAGECLASS-SPLIT-WRITERS is live: each pass writes StorageClassValid twice, and each write wakes the next pass")
		c.OptOut(suite.Convergence, "MG-STORAGECLASS-SPLIT-WRITERS is live: the StorageClassValid message never settles")
	}
	multigresInstance(c, splitWritersManager, mgOptions.WithDefect(multigres.DefectStorageClassSplitWriters, live))
	const missing = "missing-pool"
	spec := fixtures.MultigresSpec{Pools: map[string]fixtures.Pool{"main": {ReplicasPerCell: 1, StorageClass: missing}}}
	name := spec.Names().Shard
	msgs, passes, _ := storageClassMessages(c, spec)

	By("every pass that wrote StorageClassValid left it False, naming the missing pool class")
	left := storageClassValidLeft(c, name)
	Expect(left).NotTo(BeEmpty(), "no pass of shard %s that ended without an error wrote StorageClassValid", name)
	for _, l := range left {
		Expect(l.status == string(metav1.ConditionFalse) && strings.Contains(l.message, missing)).To(BeTrue(),
			"shard pass #%d left StorageClassValid %s (%q) while its pool's StorageClass %s is missing", l.pass, l.status, l.message, missing)
	}

	c.KnownDefect(multigres.DefectStorageClassSplitWriters, func() error {
		if len(msgs) > 1 {
			return fmt.Errorf("StorageClassValid alternated between %d messages over %d passes, each check writing its own: %q", len(msgs), passes, msgs)
		}
		return nil
	})
}

// passVerdict is the StorageClassValid condition a shard pass left: the pass's number (Pass.N) and the
// condition's status and message as of its last write of the condition.
type passVerdict struct {
	pass            int
	status, message string
}

// storageClassValidLeft returns, in pass order, what each pass of the Shard controller over shard that ended
// without an error left StorageClassValid as, for the passes that wrote it (as the guard's field owner). The
// condition a write left is read from the change stream at the write's resourceVersion (a write that changed
// nothing answers with the resourceVersion of the change before it); it waits up to 10 s for the stream to
// catch up with the writes.
func storageClassValidLeft(c *suite.Case, shard string) []passVerdict {
	GinkgoHelper()
	done := map[int64]suite.Pass{}
	for _, p := range c.Passes(suite.PassFilter{Name: shard, Controller: multigres.ShardControllerName}) {
		if !p.End.IsZero() && p.Err == nil {
			done[p.ID] = p
		}
	}
	last := map[int64]suite.Write{}
	var upTo uint64
	for _, w := range c.Writes(suite.WriteFilter{Kind: "Shard", Name: shard, Controller: multigres.ShardControllerName, Subresource: "status"}) {
		if _, ok := done[w.Pass]; !ok || w.FieldOwner != multigres.FieldOwnerGuard {
			continue
		}
		if prev, seen := last[w.Pass]; !seen || w.Seq > prev.Seq {
			last[w.Pass] = w
		}
		upTo = max(upTo, revisionOf(w.ResourceVersion))
	}

	// The condition after each change of the shard, in resourceVersion order.
	type state struct {
		rv              uint64
		status, message string
	}
	var states []state
	Eventually(func() uint64 {
		states = states[:0]
		var cur state
		for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Shard", Name: shard}) {
			for _, f := range ch.Fields {
				switch f.Path {
				case "status.conditions[type=StorageClassValid].status":
					cur.status = f.New
				case "status.conditions[type=StorageClassValid].message":
					cur.message = f.New
				}
			}
			cur.rv = revisionOf(ch.ResourceVersion)
			states = append(states, cur)
		}
		if len(states) == 0 {
			return 0
		}
		return states[len(states)-1].rv
	}).WithTimeout(10*time.Second).Should(BeNumerically(">=", upTo), "the change stream never saw shard %s at resourceVersion %d", shard, upTo)

	var out []passVerdict
	for id, w := range last {
		rv := revisionOf(w.ResourceVersion)
		i := sort.Search(len(states), func(i int) bool { return states[i].rv > rv }) - 1
		Expect(i).To(BeNumerically(">=", 0), "no change of shard %s at or before resourceVersion %d", shard, rv)
		out = append(out, passVerdict{pass: done[id].N, status: states[i].status, message: states[i].message})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pass < out[j].pass })
	return out
}

// revisionOf reads a resourceVersion as the etcd revision it is; 0 when it is not a number.
func revisionOf(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}
