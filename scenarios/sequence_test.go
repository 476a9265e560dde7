package scenarios

import (
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Closed-world sequences over the Multigres joints (docs/architecture.md, "Scripts (closed-world sequences)"):
// each step permits exactly the changes the operator's design makes, object by object and field path by field
// path, ordered parent before child as objects come up and child before parent as they go. Any other change in
// the namespace fails the step. A status progression (pods becoming Ready, a shard's status filling in) is paced
// by the kubelet and pooler fakes, so it is permitted as Modified at its paths and never counted.

// object is one object of a cluster's tree as a script permits it: its kind, its name, and the objects it
// creates (a cluster its TableGroups, a TableGroup its Shards, a Shard its pods).
type object struct {
	kind, name string
	children   []object
}

// clusterTree is the tree the design fans cluster out to: a TableGroup per database x table group, a Shard per
// shard of each, and each Shard's pods (see shardTree), named by the operator's naming functions.
func clusterTree(cluster *mgv1.MultigresCluster) object {
	GinkgoHelper()
	root := object{kind: "MultigresCluster", name: cluster.Name}
	for _, db := range cluster.Spec.Databases {
		for _, tg := range db.TableGroups {
			root.children = append(root.children, tableGroupTree(cluster.Name, db.Name, tg))
		}
	}
	return root
}

// tableGroupTree is the TableGroup of database x tg in cluster and its Shards.
func tableGroupTree(cluster, database string, tg mgv1.TableGroupTemplate) object {
	GinkgoHelper()
	name := multigres.TableGroupName(cluster, database, tg.Name)
	o := object{kind: "TableGroup", name: name}
	for _, sh := range tg.Shards {
		o.children = append(o.children, shardTree(name, sh))
	}
	return o
}

// shardTree is the Shard sh of the TableGroup object tableGroup and its pods: one multiorch pod per multiorch
// cell (the fixtures name them) and replicasPerCell pool pods per pool and cell.
func shardTree(tableGroup string, sh mgv1.ShardTemplate) object {
	GinkgoHelper()
	Expect(sh.Multiorch.Cells).NotTo(BeEmpty(), "shard %s: the tree needs the multiorch cells spelled out", sh.Name)
	name := multigres.ShardName(tableGroup, sh.Name)
	o := object{kind: "Shard", name: name}
	for _, cell := range sh.Multiorch.Cells {
		o.children = append(o.children, object{kind: "Pod", name: multigres.MultiorchPodName(name, cell)})
	}
	pools := make([]string, 0, len(sh.Pools))
	for p := range sh.Pools {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	for _, pool := range pools {
		for _, cell := range sh.Pools[pool].Cells {
			for i := range int(sh.Pools[pool].ReplicasPerCell) {
				o.children = append(o.children, object{kind: "Pod", name: multigres.PoolPodName(name, pool, cell, i)})
			}
		}
	}
	return o
}

// count is the number of objects in o's tree, o included.
func (o object) count() int {
	n := 1
	for _, ch := range o.children {
		n += ch.count()
	}
	return n
}

// The field paths the design lets an object change in a transition, by kind (docs/architecture.md §6).
var (
	// deletionStarted are the fields the API server sets when an object's deletion starts and a finalizer or a
	// pod's grace period keeps it: deletionTimestamp, deletionGracePeriodSeconds and the generation it bumps.
	deletionStarted = []string{"metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds", "metadata.generation"}
	// specEdited are the fields of a parent whose spec was edited: the spec, the generation and the status
	// that catches up with it.
	specEdited = []string{"spec", "metadata.generation", "status"}
)

// createdFields are the fields of a new object: a custom resource gets its finalizer and its status, a pod its
// node binding (the kubelet fake's pods/binding) and its status (the kubelet's, and PoolerDataReady from the
// Shard's readiness apply).
func createdFields(kind string) []string {
	if kind == "Pod" {
		return []string{"spec.nodeName", "status"}
	}
	return []string{"metadata.finalizers", "status"}
}

// deletedFields are the fields of an object of a cluster being deleted: the start of its deletion, and for a
// pod the kubelet's terminated status. The operator writes no status on an object being deleted.
func deletedFields(kind string) []string {
	if kind == "Pod" {
		return append([]string{"status"}, deletionStarted...)
	}
	return deletionStarted
}

// retiredFields are the fields of an object its parent no longer wants: its handshake annotation (pending
// deletion on a TableGroup or Shard, the drain state on a pod), its status (ReadyForDeletion; a pod's
// PoolerDataReady once its pooler is shut down, then the kubelet's terminated status) and the start of its
// deletion.
func retiredFields(kind string) []string {
	ann := "metadata.annotations." + multigres.AnnotationPendingDeletion
	if kind == "Pod" {
		ann = "metadata.annotations." + multigres.AnnotationDrainState
	}
	return append([]string{ann, "status"}, deletionStarted...)
}

// created permits o's tree coming up: each object Added once and updated at createdFields, each object's
// creation and first update (its finalizer: a parent holds it before it creates a child) before its children's.
func created(o object) suite.Permit {
	self := suite.All(suite.Permits(suite.Added, o.kind, o.name), suite.Permits(suite.Modified, o.kind, o.name, createdFields(o.kind)...))
	if len(o.children) == 0 {
		return self
	}
	children := make([]suite.Permit, len(o.children))
	for i, ch := range o.children {
		children[i] = created(ch)
	}
	return suite.Before(self, suite.All(children...))
}

// gone permits o's tree going away: each object updated at fields(kind) and Deleted once; each object's first
// update (its parent started its removal) before its children's, and its Deleted after every child's.
func gone(o object, fields func(kind string) []string) suite.Permit {
	mod := suite.Permits(suite.Modified, o.kind, o.name, fields(o.kind)...)
	del := suite.Permits(suite.Deleted, o.kind, o.name)
	if len(o.children) == 0 {
		return suite.Before(mod, del)
	}
	children := make([]suite.Permit, len(o.children))
	for i, ch := range o.children {
		children[i] = gone(ch, fields)
	}
	return suite.Before(mod, suite.Before(suite.All(children...), del))
}

// edited permits updates of kind/name at paths (default specEdited): a parent whose spec a step edits.
func edited(kind, name string, paths ...string) suite.Permit {
	if len(paths) == 0 {
		paths = specEdited
	}
	return suite.Permits(suite.Modified, kind, name, paths...)
}

// afterQuiet is the Finish window of a script whose last step was followed by a wait for quiescence: Finish
// examines every change since the step, the wait's included, and the namespace has just been quiet, so its own
// window only has to catch a change racing the end of the quiet window.
const afterQuiet = 250 * time.Millisecond

// convergenceQuiet is how long the namespace must be quiet before a script finishes over a settled state (the
// convergence oracle's window).
const convergenceQuiet = 250 * time.Millisecond

var _ = Describe("multigres sequences", Label("multigres"), func() {
	It("a cluster of 2 databases x 2 table groups x 2 shards fans out cluster -> table groups -> shards -> pods, and deleting it removes pods -> shards -> table groups -> cluster, nothing else changing (over 3 s: 29 objects come up and go level by level, each level waiting for the one above)", fanOutSpec)

	It("a pool scaled 3 -> 2 drains its last pod through the handshake, then deletes it; the shard's other pods and their roles are untouched", poolDrainSpec)
})

// fanOutCluster is the fixtures' cluster grown to databases db and db2, each with table groups tg and tg2 of
// shards 0 and 1, each shard with one multiorch pod and a pool of one pod.
func fanOutCluster() *mgv1.MultigresCluster {
	GinkgoHelper()
	cluster, err := fixtures.Multigres(fixtures.MultigresSpec{Pools: map[string]fixtures.Pool{
		"main": {ReplicasPerCell: 1, StorageClass: fixtures.StandardStorageClass}}})
	Expect(err).NotTo(HaveOccurred())
	db := &cluster.Spec.Databases[0]
	tg := &db.TableGroups[0]
	shard := *tg.Shards[0].DeepCopy()
	shard.Name = "1"
	tg.Shards = append(tg.Shards, shard)
	tg2 := *tg.DeepCopy()
	tg2.Name = "tg2"
	db.TableGroups = append(db.TableGroups, tg2)
	db2 := *db.DeepCopy()
	db2.Name = "db2"
	cluster.Spec.Databases = append(cluster.Spec.Databases, db2)
	return cluster
}

// fanOutSpec creates the fan-out cluster in one closed-world step, waits until it is Healthy and quiet, then
// deletes it in another: the design's changes, in the design's order, and no other.
func fanOutSpec() {
	c := s.NewCase(GinkgoT())
	cluster := fanOutCluster()
	tree := clusterTree(cluster)

	By(fmt.Sprintf("creating the cluster: %d objects", tree.count()))
	start := time.Now()
	create := c.Script("create the cluster")
	create.RequireStep("create the cluster", func() error { return c.Create(cluster) }, created(tree))
	Eventually(func(g Gomega) {
		mc := &mgv1.MultigresCluster{}
		g.Expect(c.Get(cluster.Name, mc)).To(Succeed())
		g.Expect(mc.Status.Phase).To(Equal(mgv1.PhaseHealthy), "cluster: %d of %d table groups ready", mc.Status.ReadyTableGroups, mc.Status.TotalTableGroups)
	}).WithTimeout(healthyTimeout).Should(Succeed(), "the cluster never became Healthy")
	c.RequireQuiescent(convergenceQuiet, 30*time.Second)
	create.RequireFinish(afterQuiet)
	AddReportEntry("fan-out", fmt.Sprintf("%d objects Healthy and quiet in %s", tree.count(), time.Since(start).Round(time.Millisecond)))

	By("deleting the cluster")
	start = time.Now()
	del := c.Script("delete the cluster")
	del.RequireStep("delete the cluster", func() error {
		mc := &mgv1.MultigresCluster{}
		if err := c.Get(cluster.Name, mc); err != nil {
			return err
		}
		return c.Delete(mc)
	}, gone(tree, deletedFields))
	del.RequireFinish(afterQuiet)
	expectNoMultigresObjects(c, cluster.Name)
	Expect(failedPasses(c)).To(BeEmpty(), "bringing the cluster up and deleting it made passes fail")
	AddReportEntry("deletion", fmt.Sprintf("%d objects gone in %s", tree.count(), time.Since(start).Round(time.Millisecond)))
}

// expectNoMultigresObjects checks that the case's namespace holds no cluster, TableGroup, Shard or pod.
func expectNoMultigresObjects(c *suite.Case, cluster string) {
	GinkgoHelper()
	Expect(apierrors.IsNotFound(c.Get(cluster, &mgv1.MultigresCluster{}))).To(BeTrue(), "the cluster is still there")
	tgs, shards, pods := &mgv1.TableGroupList{}, &mgv1.ShardList{}, &corev1.PodList{}
	Expect(c.List(tgs)).To(Succeed())
	Expect(c.List(shards)).To(Succeed())
	Expect(c.List(pods)).To(Succeed())
	Expect(tgs.Items).To(BeEmpty(), "table groups left after the cluster is gone")
	Expect(shards.Items).To(BeEmpty(), "shards left after the cluster is gone")
	Expect(pods.Items).To(BeEmpty(), "pods left after the cluster is gone")
}

// scaleDownShardFields are the field paths of a shard whose pool loses pod removed: the spec and generation the
// TableGroup applies, the status catching up (observedGeneration; conditions, phase, message and poolsReady
// while the drained pod is not Ready; readyReplicas) and the removed pod's role. Not the roles of the pods it
// keeps, orchReady nor cells.
func scaleDownShardFields(removed string) []string {
	return []string{"spec", "metadata.generation", "status.observedGeneration", "status.conditions", "status.phase",
		"status.message", "status.poolsReady", "status.readyReplicas", "status.podRoles." + removed}
}

// poolDrainSpec brings up a shard with a pool of 3 whose PRIMARY is pod 0 (so that removing pod 2 moves no
// role), scales the pool 3 -> 2 in one closed-world step, and reads the removed pod's handshake from the stream.
func poolDrainSpec() {
	c := s.NewCase(GinkgoT())
	spec := fixtures.MultigresSpec{Pools: map[string]fixtures.Pool{"main": {ReplicasPerCell: 3, StorageClass: fixtures.StandardStorageClass}}}
	names := spec.Names()
	bringUpFirstPrimary(c, spec)
	removed := spec.PoolPods("main", 3)[2]

	By("scaling the pool 3 -> 2")
	since := time.Now()
	sc := c.Script("scale the pool down")
	sc.RequireStep("scale the pool 3 -> 2", func() error { setPoolReplicas(c, names.Cluster, "main", 2); return nil },
		suite.Before(edited("MultigresCluster", names.Cluster), suite.Before(edited("TableGroup", names.TableGroup),
			suite.Before(edited("Shard", names.Shard, scaleDownShardFields(removed)...), gone(object{kind: "Pod", name: removed}, retiredFields)))))
	settleShards(c, names.Cluster, []string{names.Shard})
	sc.RequireFinish(afterQuiet)

	Expect(drainHandshake(c, removed, since)).To(Equal([]string{
		"drain " + multigres.DrainRequested, "drain " + multigres.DrainDraining, "drain " + multigres.DrainAcknowledged,
		"PoolerDataReady " + multigres.ReasonPoolerShutdown, "drain " + multigres.DrainReadyForDeletion, "deletion started", "Deleted",
	}), "pod %s: the drain handshake, in resourceVersion order", removed)
	expectConvergedTo(c, names, spec.PoolPods("main", 2))
	Expect(failedPasses(c)).To(BeEmpty(), "the drain made passes fail")
}

// bringUpFirstPrimary creates spec's cluster with multiorch elections frozen until every pool pod's pooler has
// registered, so that multiorch elects the lowest ordinal PRIMARY rather than whichever registered first, and
// waits until the shard is Healthy and quiet.
func bringUpFirstPrimary(c *suite.Case, spec fixtures.MultigresSpec) {
	GinkgoHelper()
	names := spec.Names()
	pods := spec.PoolPods("main", int(spec.Pools["main"].ReplicasPerCell))
	topology.FreezeElections(c.Namespace, true)
	DeferCleanup(topology.FreezeElections, c.Namespace, false)
	cluster, err := fixtures.Multigres(spec)
	Expect(err).NotTo(HaveOccurred())
	Expect(c.Create(cluster)).To(Succeed())
	Eventually(func() []string {
		var hosts []string
		for _, pl := range topology.Snapshot(c.Namespace) {
			hosts = append(hosts, pl.Hostname)
		}
		slices.Sort(hosts)
		return hosts
	}).WithTimeout(healthyTimeout).Should(Equal(pods), "the pool pods' poolers never registered")
	topology.FreezeElections(c.Namespace, false)
	settleShards(c, names.Cluster, []string{names.Shard})
	Expect(roles(shardOf(c, names.Shard).Status.PodRoles, "PRIMARY")).To(Equal(pods[:1]), "setup: multiorch elected another PRIMARY")
}

// drainHandshake reads pod's handshake from the stream since since, in resourceVersion order: each drain state
// its annotation took ("drain <state>"), each PoolerDataReady reason it took once draining ("PoolerDataReady
// <reason>"), the start of its deletion and its Deleted.
func drainHandshake(c *suite.Case, pod string, since time.Time) []string {
	var out []string
	draining := false
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod", Name: pod, Since: since}) {
		if ch.Type == suite.Deleted {
			out = append(out, "Deleted")
		}
		for _, f := range ch.Fields {
			switch {
			case f.Path == "metadata.annotations."+multigres.AnnotationDrainState:
				out, draining = append(out, "drain "+f.New), true
			case draining && f.Path == "status.conditions[type="+string(multigres.PodConditionPoolerDataReady)+"].reason":
				out = append(out, "PoolerDataReady "+f.New)
			case f.Path == "metadata.deletionTimestamp" && f.Old == "<absent>":
				out = append(out, "deletion started")
			}
		}
	}
	return out
}
