package scenarios

import (
	"fmt"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Two reconcilers write one Shard: the TableGroup controller server-side-applies its metadata and spec (field
// owner multigres-operator), and the Shard controller writes its finalizer and its status, under two field
// owners: multigres-resource-handler for updateStatus and the podRoles patch, multigres-resource-handler-guard
// for the StorageClassValid condition only (docs/architecture.md §6 Shard). managedFields tells the field
// owners apart; the recorder (Case.FieldWriters, Case.Writes) tells the controllers apart.

// shardTableGroupWriter and shardStatusWriter are the two reconcilers that write a Shard, as the recorder
// names them ("manager/controller").
const (
	shardTableGroupWriter = "multigres/" + multigres.TableGroupControllerName
	shardStatusWriter     = "multigres/" + multigres.ShardControllerName
)

// shardStatusOwners is, for each status field of the design, the one field owner that must own it.
var shardStatusOwners = map[string]string{
	"status.observedGeneration": multigres.FieldOwnerResourceHandler,
	"status.phase":              multigres.FieldOwnerResourceHandler,
	"status.message":            multigres.FieldOwnerResourceHandler,
	"status.cells":              multigres.FieldOwnerResourceHandler,
	"status.orchReady":          multigres.FieldOwnerResourceHandler,
	"status.poolsReady":         multigres.FieldOwnerResourceHandler,
	"status.readyReplicas":      multigres.FieldOwnerResourceHandler,
	"status.podRoles":           multigres.FieldOwnerResourceHandler,
	"status.conditions[type=" + mgv1.ConditionAvailable + "]":         multigres.FieldOwnerResourceHandler,
	"status.conditions[type=" + mgv1.ConditionPostureConsistent + "]": multigres.FieldOwnerResourceHandler,
	"status.conditions[type=" + mgv1.ConditionStorageClassValid + "]": multigres.FieldOwnerGuard,
}

// designShardOwner is the field owner the design gives a managed path of a live, not retiring Shard; "" for a
// path it gives none.
func designShardOwner(path string) string {
	switch {
	case strings.HasPrefix(path, "metadata.labels.") || strings.HasPrefix(path, "metadata.ownerReferences") ||
		strings.HasPrefix(path, "spec."):
		return multigres.FieldOwnerOperator
	case strings.HasPrefix(path, "metadata.finalizers"):
		return multigres.FieldOwnerResourceHandler
	case strings.HasPrefix(path, "status.conditions[type="+mgv1.ConditionStorageClassValid+"]"):
		return multigres.FieldOwnerGuard
	case strings.HasPrefix(path, "status."):
		return multigres.FieldOwnerResourceHandler
	}
	return ""
}

var _ = Describe("multigres ownership", Label("multigres"), func() {
	It("two reconcilers write one Shard: the TableGroup controller its spec, the Shard controller its status, each field under the field owner the design gives it", shardOwnershipSpec)
})

// ownershipBackupClass is the StorageClass the ownership spec moves the shard's backups to (cluster-scoped,
// created by the spec, left for the other specs: nothing else names it).
const ownershipBackupClass = "ownership-backup"

// shardOwnershipSpec brings up a shard, changes its backup StorageClass so that the TableGroup controller
// changes the live Shard's spec (without creating pods), and checks on the quiet Shard who owns
// (managedFields) and who wrote (the recorder) each field.
func shardOwnershipSpec() {
	c := s.NewCase(GinkgoT())
	spec := fixtures.MultigresSpec{}
	names := spec.Names()
	bringUpHealthy(c, spec)

	By("moving backups to another StorageClass: the TableGroup controller applies the new spec to the live Shard")
	Expect(createStorageClass(GinkgoT().Context(), ownershipBackupClass)).To(Succeed())
	mc := &mgv1.MultigresCluster{}
	Expect(c.Update(names.Cluster, mc, func() {
		mc.Spec.Databases[0].TableGroups[0].Shards[0].BackupStorageClass = ownershipBackupClass
	})).To(Succeed())
	Eventually(func(g Gomega) {
		sh := &mgv1.Shard{}
		g.Expect(c.Get(names.Shard, sh)).To(Succeed())
		g.Expect(sh.Spec.BackupStorageClass).To(Equal(ownershipBackupClass))
		g.Expect(sh.Status.ObservedGeneration).To(Equal(sh.Generation))
		g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard: %s", sh.Status.Message)
	}).WithTimeout(healthyTimeout).Should(Succeed(), "the shard never caught up with its new backup StorageClass")
	if _, err := c.Quiescent(time.Second, 20*time.Second); err != nil {
		Fail(fmt.Sprintf("%v\n%s", err, shardOwnersReport(c, names.Shard)))
	}

	sh := shardOf(c, names.Shard)
	Expect(sh).To(suite.HaveSingleFieldOwners())
	Expect(sh).To(suite.HaveFieldManagersWithin(multigres.FieldOwners()...))
	expectDesignOwners(sh)
	expectDesignWriters(c, sh.Name)
}

// shardOwnersReport names, for a failure, the Shard's writes per field owner and the field owners of its
// status fields now: the field managers behind a status that keeps changing.
func shardOwnersReport(c *suite.Case, shard string) string {
	perOwner := map[string]int{}
	for _, w := range c.Writes(suite.WriteFilter{Kind: "Shard", Name: shard, IncludeRejected: true}) {
		perOwner[fmt.Sprintf("%s%s by %q", w.Verb, sub(w.Subresource), w.FieldOwner)]++
	}
	var lines []string
	for k, n := range perOwner {
		lines = append(lines, fmt.Sprintf("  %s: %d writes", k, n))
	}
	sort.Strings(lines)
	sh := &mgv1.Shard{}
	if err := c.Get(shard, sh); err == nil {
		if own, err := suite.OwnershipOf(sh); err == nil {
			for _, field := range sets.List(sets.KeySet(shardStatusOwners)) {
				lines = append(lines, fmt.Sprintf("  %s is owned by %v (the design: %s)", field, own.Owners(field), shardStatusOwners[field]))
			}
		}
	}
	return "Shard " + shard + ":\n" + strings.Join(lines, "\n")
}

// expectDesignOwners checks the Shard's managedFields against the design: every status field of
// shardStatusOwners is owned by exactly its field owner, and every managed path by designShardOwner's.
func expectDesignOwners(sh *mgv1.Shard) {
	GinkgoHelper()
	own, err := suite.OwnershipOf(sh)
	Expect(err).NotTo(HaveOccurred())
	for _, field := range sets.List(sets.KeySet(shardStatusOwners)) {
		Expect(own.Owners(field)).To(Equal([]string{shardStatusOwners[field]}), "field owners of %s", field)
	}
	var wrong []string
	for m, paths := range own {
		for _, p := range paths {
			if want := designShardOwner(p); want != m {
				wrong = append(wrong, fmt.Sprintf("%s is owned by %s; the design gives it to %q", p, m, want))
			}
		}
	}
	sort.Strings(wrong)
	Expect(wrong).To(BeEmpty(), "Shard %s: fields owned against the design", sh.Name)
}

// expectDesignWriters checks, from the recorder, that the two reconcilers split the Shard as designed: every
// changed spec field (and the generation it bumps) was written by the TableGroup controller alone, every
// changed status field by the Shard controller alone, and that the Shard's successful writes are exactly the design's
// (writer, verb, subresource, field owner) kinds.
func expectDesignWriters(c *suite.Case, shard string) {
	GinkgoHelper()
	var wrong []string
	specChanged := false
	for path, writers := range c.FieldWriters("Shard", shard) {
		var want string
		switch {
		case strings.HasPrefix(path, "status."):
			want = shardStatusWriter
		case strings.HasPrefix(path, "spec.") || path == "metadata.generation":
			want, specChanged = shardTableGroupWriter, specChanged || strings.HasPrefix(path, "spec.")
		default:
			// The finalizer: the TableGroup controller's no-op apply of the Shard can return in the same
			// instant as the Shard controller's finalizer patch, with its resourceVersion, and FieldWriters
			// cannot tell them apart (see its comment). managedFields names the finalizer's field owner.
			continue
		}
		if len(writers) != 1 || writers[0] != want {
			wrong = append(wrong, fmt.Sprintf("%s written by %s; the design: %s", path, strings.Join(writers, ", "), want))
		}
	}
	sort.Strings(wrong)
	Expect(wrong).To(BeEmpty(), "Shard %s: fields written against the design", shard)
	Expect(specChanged).To(BeTrue(), "setup: no spec field of the live Shard changed")

	got := sets.New[string]()
	for _, w := range c.Writes(suite.WriteFilter{Kind: "Shard", Name: shard}) {
		got.Insert(fmt.Sprintf("%s/%s %s%s %s", w.Manager, w.Controller, w.Verb, sub(w.Subresource), w.FieldOwner))
	}
	want := sets.New(
		shardTableGroupWriter+" apply "+multigres.FieldOwnerOperator,
		shardStatusWriter+" patch "+multigres.FieldOwnerResourceHandler,        // the finalizer
		shardStatusWriter+" apply/status "+multigres.FieldOwnerResourceHandler, // updateStatus
		shardStatusWriter+" patch/status "+multigres.FieldOwnerResourceHandler, // podRoles
		shardStatusWriter+" apply/status "+multigres.FieldOwnerGuard,           // StorageClassValid
	)
	Expect(sets.List(got)).To(Equal(sets.List(want)), "the Shard's writes, as writer verb[/subresource] field owner")
}
