package scenarios

import (
	"fmt"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/ensembletest/ensemble/fakes/pooler"
	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Selector impostors: pods in the shard's namespace that carry every identity label of the shard's pool pods
// (multigres.com/*, app.kubernetes.io/component=shard-pool) but that the shard does not control. The Shard
// controller selects its pods by those labels; it must then keep only the pods whose controller owner
// reference is the shard, so that an impostor is neither counted in the shard's status nor drained or
// deleted on a scale-down.

// operatorManagers are the suite's managers that run a reference operator's controllers (the others are the
// fakes, the harness's looper and the cases).
var operatorManagers = sets.New("multigres", "matrixone")

// impostor describes one impostor pod: its name and the controller owner reference it carries (nil: none).
type impostor struct {
	name  string
	owner *metav1.OwnerReference
}

// impostorPod returns a copy of the pool pod the shard would create for pool in cell, renamed to im.name and
// with im.owner as its only owner reference. It has no readiness gate, so the data plane makes it Ready: the
// most tempting pod to count.
func impostorPod(shard *mgv1.Shard, pool, cell string, im impostor) *corev1.Pod {
	p := multigres.PoolPod(shard, pool, cell, 0)
	p.Name, p.Namespace, p.OwnerReferences = im.name, "", nil
	if im.owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*im.owner}
	}
	p.Spec.ReadinessGates = nil
	return p
}

// createImpostors creates, beside the named Healthy shard, two impostors: one named in the shard's own pool
// pod pattern (an index above any replica count the spec uses) with no owner reference, and one with another
// name whose controller is a ConfigMap. It waits until both run and their poolers registered in topology
// (the pooler simulator goes by labels, as a real pooler process would), and returns their UIDs by name.
func createImpostors(c *suite.Case, spec fixtures.MultigresSpec) map[string]types.UID {
	GinkgoHelper()
	sh := shardOf(c, spec.Names().Shard)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "impostor-owner"}}
	Expect(c.Create(owner)).To(Succeed())
	ims := []impostor{
		{name: multigres.PoolPodName(sh.Name, "main", spec.Cells[0], 7)},
		{name: "impostor-foreign-controller", owner: metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))},
	}
	for _, im := range ims {
		Expect(c.Create(impostorPod(sh, "main", spec.Cells[0], im))).To(Succeed())
	}
	uids := map[string]types.UID{}
	Eventually(func(g Gomega) {
		registered := sets.New[string]()
		for _, pl := range topology.Snapshot(c.Namespace) {
			registered.Insert(pl.Hostname)
		}
		for _, im := range ims {
			p := &corev1.Pod{}
			g.Expect(c.Get(im.name, p)).To(Succeed())
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "impostor %s", im.name)
			g.Expect(registered.Has(im.name)).To(BeTrue(), "impostor %s has no pooler in topology", im.name)
			uids[im.name] = p.UID
		}
	}).WithTimeout(healthyTimeout).Should(Succeed(), "setup: the impostors never ran and registered")
	return uids
}

// expectImpostorsUntouched checks that no operator controller wrote to any impostor (the recorder's writes),
// that no change of one set a drain state or a deletionTimestamp or deleted it (the event stream), and that each
// still exists with its UID, not being deleted and with no drain annotation. It returns the writers of each impostor, for the
// report.
func expectImpostorsUntouched(c *suite.Case, uids map[string]types.UID) map[string][]string {
	GinkgoHelper()
	writers := map[string][]string{}
	for _, name := range sets.List(sets.KeySet(uids)) {
		var byOperator []string
		who := sets.New[string]()
		for _, w := range c.Writes(suite.WriteFilter{Kind: "Pod", Name: name, IncludeRejected: true}) {
			who.Insert(w.Manager + "/" + w.Controller)
			if operatorManagers.Has(w.Manager) {
				byOperator = append(byOperator, fmt.Sprintf("%s/%s %s%s (field owner %q)", w.Manager, w.Controller, w.Verb, sub(w.Subresource), w.FieldOwner))
			}
		}
		Expect(byOperator).To(BeEmpty(), "operator controllers wrote to impostor %s", name)
		for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod", Name: name}) {
			Expect(ch.Type).NotTo(Equal(suite.Deleted), "impostor %s was deleted: %s", name, ch)
			for _, f := range ch.Fields {
				Expect(f.Path).NotTo(BeElementOf("metadata.deletionTimestamp", "metadata.annotations."+multigres.AnnotationDrainState),
					"impostor %s: %s", name, ch)
			}
		}
		p := &corev1.Pod{}
		if err := c.Get(name, p); err != nil {
			Fail(fmt.Sprintf("impostor %s: %v", name, err))
		}
		Expect(p.UID).To(Equal(uids[name]), "impostor %s was deleted and replaced", name)
		Expect(p.DeletionTimestamp).To(BeNil(), "impostor %s is being deleted", name)
		Expect(p.Annotations).NotTo(HaveKey(multigres.AnnotationDrainState), "impostor %s was sent through the shard's drain", name)
		writers[name] = sets.List(who)
	}
	return writers
}

// sub renders a write's subresource as "/status", or "" for the main resource.
func sub(s string) string {
	if s == "" {
		return ""
	}
	return "/" + s
}

// expectShardCounts checks the shard's status against exactly pods (its own pool pods, sorted): Healthy,
// readyReplicas = len(pods), podRoles naming exactly pods with one PRIMARY, poolsReady and
// PostureConsistent True.
func expectShardCounts(c *suite.Case, name string, pods []string) {
	GinkgoHelper()
	sh := shardOf(c, name)
	Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard %s: %s", name, sh.Status.Message)
	Expect(sh.Status.ReadyReplicas).To(BeEquivalentTo(len(pods)), "readyReplicas counts pods that are not the shard's own %v", pods)
	Expect(sets.List(sets.KeySet(sh.Status.PodRoles))).To(Equal(pods), "podRoles must name exactly the shard's pool pods")
	Expect(roles(sh.Status.PodRoles, "PRIMARY")).To(HaveLen(1), "podRoles = %v", sh.Status.PodRoles)
	Expect(sh.Status.PoolsReady).To(BeTrue())
	for _, cond := range sh.Status.Conditions {
		if cond.Type == mgv1.ConditionPostureConsistent {
			Expect(cond.Status).To(Equal(metav1.ConditionTrue), "PostureConsistent: %s", cond.Message)
		}
	}
}

// scalePool sets replicasPerCell of pool in the case's cluster to replicas, waits until the shard controls
// exactly the pool pods that makes and the namespace is quiet for 500 ms, and checks the shard's counts
// against them (expectShardCounts).
func scalePool(c *suite.Case, spec fixtures.MultigresSpec, pool string, replicas int) {
	GinkgoHelper()
	names := spec.Names()
	setPoolReplicas(c, names.Cluster, pool, int32(replicas))
	Eventually(func(g Gomega) {
		g.Expect(ownedPoolPods(g, c, names.Shard)).To(Equal(spec.PoolPods(pool, replicas)))
	}).WithTimeout(healthyTimeout).Should(Succeed(), "the shard never scaled pool %s to %d replicas per cell", pool, replicas)
	c.RequireQuiescent(500*time.Millisecond, 30*time.Second)
	expectShardCounts(c, names.Shard, spec.PoolPods(pool, replicas))
}

var _ = Describe("multigres selector impostors", Label("multigres"), func() {
	It("pods with the shard's identity labels that the shard does not control are neither counted nor deleted, through a scale-down", impostorSpec)
})

// impostorSpec brings up a shard with a pool of 3, adds two impostors, scales the pool down to 1 and checks,
// once the namespace is quiet, that the shard counts only its own pod and that the impostors are untouched.
func impostorSpec() {
	c := s.NewCase(GinkgoT())
	spec := fixtures.MultigresSpec{Cells: []string{"z1"}, Pools: map[string]fixtures.Pool{"main": {ReplicasPerCell: 3, StorageClass: fixtures.StandardStorageClass}}}
	bringUpHealthy(c, spec)
	uids := createImpostors(c, spec)

	By("scaling the pool 3 -> 1: the shard drains and deletes the pods it no longer wants")
	scalePool(c, spec, "main", 1)
	writers := expectImpostorsUntouched(c, uids)
	var lines []string
	for _, name := range sets.List(sets.KeySet(writers)) {
		lines = append(lines, name+" written by "+strings.Join(writers[name], ", "))
	}
	AddReportEntry("impostor writers", strings.Join(lines, "; "))
	AddReportEntry("impostor poolers in topology", impostorPoolers(c, uids))
}

// impostorPoolers renders the topology records of the impostors' poolers ("name lifecycle role"), and the
// operator's topology writes to them, for the report: the shard prunes poolers whose hostname is not one of
// its pods.
func impostorPoolers(c *suite.Case, uids map[string]types.UID) string {
	var out []string
	for _, pl := range topology.Snapshot(c.Namespace) {
		if _, ok := uids[pl.Hostname]; ok {
			out = append(out, fmt.Sprintf("%s %s %q", pl.Name, pl.Lifecycle, pl.Role))
		}
	}
	for _, e := range topology.Log(c.Namespace) {
		if _, ok := uids[strings.TrimPrefix(e.Pooler, pooler.PoolerNamePrefix)]; ok && e.Op == "set-lifecycle" {
			out = append(out, fmt.Sprintf("operator set-lifecycle %s %s", e.Pooler, e.Detail))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
