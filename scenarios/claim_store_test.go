package scenarios

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	fakehk "github.com/ensembletest/ensemble/fakes/hakeeperfake"
	"github.com/ensembletest/ensemble/operators/matrixone"
	"github.com/ensembletest/ensemble/operators/matrixone/hakeeper"
	"github.com/ensembletest/ensemble/pins"
	"github.com/ensembletest/ensemble/suite"
)

// A claim's status.store is read back from the operator's store cache right after the bind's own
// PatchCNStore. The cache is a snapshot of HAKeeper refreshed every StoreCacheRefresh, and one taken
// between the store's registration and the patch holds the store without the claim's labels. At the
// fixtures' scale the refresh is 150 ms, so a later claim pass usually reads a fresh snapshot by chance:
// make explore met the stale status under a stale LogSet view on a loaded machine. The pin runs its own
// operator instance whose cache refreshes every staleStoreRefresh, so the snapshot that admitted the pool's
// idle pod is still the current one when the claim binds: the race constructed, not sampled. That instance
// has the defect live (pins.Default.PinState); the shared matrixone manager has it fixed, since at 150 ms the
// race still happened under load in other specs' unperturbed runs, and explore's differential oracle then took
// the stale status for the truth and failed every correct run of those specs.

var _ = Describe("matrixone CNClaim", Label("matrixone", "claim"), func() {
	It("pins MO-CLAIM-STALE-STORE-STATUS: a claim bound right after its pod's admission reports its store without the labels it gave it", Label("pin"), staleStoreStatusSpec)
})

// staleStoreRefresh is the pin's store-cache refresh period: far longer than the claim takes to bind once
// its pod is Idle, so the bind reads the snapshot that admitted the pod.
const staleStoreRefresh = 5 * time.Second

// staleStoreStatusSpec brings a cluster with one idle CN pod up under an operator instance of its own (its
// store cache refreshing every staleStoreRefresh), binds a claim labelled tenant=tenant to that pod and reads
// the claim's status as its bind wrote it: with the defect, status.store has no labels although HAKeeper's
// store has the claim's; fixed, the bind's read-back shows them.
func staleStoreStatusSpec() {
	c := s.NewCase(GinkgoT(), suite.Unadmitted())
	state, err := pins.Default.PinState(matrixone.DefectClaimStaleStoreStatus)
	Expect(err).NotTo(HaveOccurred())
	opts := scopedOptions(c.Namespace, "r1", true)
	opts.Live[matrixone.DefectClaimStaleStoreStatus] = state == pins.Live
	opts.StoreCacheRefresh = staleStoreRefresh
	operatorInstance(c, "mo-store-cache", opts)
	e := newClaimEnv(c, claimClusterSpec(1, 0))
	e.settlePool(0, 1)

	By("binding a claim to the idle pod while the snapshot that admitted it is current")
	e.createClaim("a", "tenant")
	pod := e.expectBound("a")
	st, ok := haKeeper.PodStore(c.Namespace, pod)
	Expect(ok).To(BeTrue(), "pod %s has no store in HAKeeper", pod)
	// The claim read Bound from the API server; the event stream may deliver that change a moment later.
	var bound string
	var at time.Time
	Eventually(func() (found bool) {
		bound, at, found = boundStoreLabels(c, "a")
		return found
	}).WithTimeout(claimTimeout).Should(BeTrue(), "no change of claim a set status.phase Bound")

	c.KnownDefect(matrixone.DefectClaimStaleStoreStatus, func() error {
		if bound != "" {
			return nil
		}
		if len(st.Labels) == 0 {
			return suite.Harness(fmt.Errorf("store %s of pod %s has no labels in HAKeeper: the bind's PatchCNStore did not label it", st.UUID, pod))
		}
		if refreshedAfterPatch(c, st.UUID, at) {
			return suite.Harness(fmt.Errorf("the store cache was refreshed between the bind's PatchCNStore and its status write, yet status.store has no labels"))
		}
		return fmt.Errorf("claim a Bound on %s with status.store.labels empty, HAKeeper's store %s (its bind read a snapshot older than its PatchCNStore)",
			pod, storeLabelText(st.Labels))
	})
}

// boundStoreLabels returns the status.store.labels fields of the change that first made claim name Bound,
// as "path=value" pairs in path order ("" when that change set none), when the stream saw that change, and
// whether there was one.
func boundStoreLabels(c *suite.Case, name string) (labels string, at time.Time, found bool) {
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "CNClaim", Name: name}) {
		bound := false
		var set []string
		for _, f := range ch.Fields {
			if f.Path == "status.phase" && f.New == "Bound" {
				bound = true
			}
			if strings.HasPrefix(f.Path, "status.store.labels") && f.New != "<absent>" {
				set = append(set, f.Path+"="+f.New)
			}
		}
		if bound {
			return strings.Join(set, ","), ch.Time, true
		}
	}
	return "", time.Time{}, false
}

// refreshedAfterPatch reports whether HAKeeper answered a GetClusterDetails after the first PatchCNStore
// of store uuid in the case's namespace and before `before`: a store cache refreshed then saw the patch.
func refreshedAfterPatch(c *suite.Case, uuid string, before time.Time) bool {
	patched := false
	for _, call := range haKeeper.Log(c.Namespace) {
		switch {
		case call.Time.After(before):
			return false
		case call.Op == fakehk.OpPatchCNStore && call.UUID == uuid:
			patched = true
		case patched && call.Op == fakehk.OpGetClusterDetails && call.Err == "":
			return true
		}
	}
	return false
}

// storeLabelText renders a store's labels as "[key:v1,v2 ...]".
func storeLabelText(labels []hakeeper.Label) string {
	var out []string
	for _, l := range labels {
		out = append(out, l.Key+":"+strings.Join(l.Values, ","))
	}
	return "[" + strings.Join(out, " ") + "]"
}
