package scenarios

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/multigres"
	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
	"github.com/ensembletest/ensemble/suite"
)

// Transitions and round-trip equality: a child removed from a live cluster's spec goes through the
// pending-deletion handshake (its parent annotates it, it drains and reports ReadyForDeletion=True, the parent
// deletes it), and putting the spec back (A -> B -> A) returns the namespace to the same TableGroups, Shards and
// pods, by name, with the same status once quiet.
// Each direction is a closed-world script step (sequence_test.go): it permits exactly the retirement or the
// re-creation, in tree order, and no change to the objects the transition keeps.

// roundTripIgnored are the keys the round trip compares without: identity and bookkeeping that a recreated
// object necessarily gets anew (uid, resourceVersion, managedFields, generation and the observedGenerations that
// follow it: the parents' specs were edited twice), timestamps, and what the data plane hands out per pod life
// (pod IPs, container IDs, which embed the pod's UID).
var roundTripIgnored = map[string]bool{
	"uid": true, "resourceVersion": true, "managedFields": true, "generation": true, "observedGeneration": true,
	"creationTimestamp": true, "lastTransitionTime": true, "lastProbeTime": true, "startTime": true, "startedAt": true,
	"podIP": true, "podIPs": true, "containerID": true,
}

// roundTripSnapshot reads the case's TableGroups, Shards and pods as "Kind/name" -> the object as a map, with
// each Shard's podRoles replaced by its sorted pod names and sorted roles: which pool pod multiorch elects
// PRIMARY is the pooler fake's registration race (the lowest ordinal registered in time), not the operator's
// state.
func roundTripSnapshot(c *suite.Case) map[string]map[string]any {
	GinkgoHelper()
	out := map[string]map[string]any{}
	add := func(kind string, obj client.Object) {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		Expect(err).NotTo(HaveOccurred())
		delete(m, "apiVersion")
		delete(m, "kind")
		out[kind+"/"+obj.GetName()] = m
	}
	tgs, shards, pods := &mgv1.TableGroupList{}, &mgv1.ShardList{}, &corev1.PodList{}
	Expect(c.List(tgs)).To(Succeed())
	Expect(c.List(shards)).To(Succeed())
	Expect(c.List(pods)).To(Succeed())
	for i := range tgs.Items {
		add("TableGroup", &tgs.Items[i])
	}
	for i := range shards.Items {
		sh := &shards.Items[i]
		add("Shard", sh)
		status, _ := out["Shard/"+sh.Name]["status"].(map[string]any)
		if status != nil {
			status["podRoles"] = map[string]any{"pods": slices.Sorted(maps.Keys(sh.Status.PodRoles)),
				"roles": slices.Sorted(maps.Values(sh.Status.PodRoles))}
		}
	}
	for i := range pods.Items {
		add("Pod", &pods.Items[i])
	}
	return out
}

// listOrder orders the elements of a list for the round trip's comparison: by "type" or "name" for objects
// (conditions, container statuses: the order two writers appended them in is not state), by value for
// strings. Lists compare as sets of elements so ordered.
func listOrder(a, b any) bool { return listKey(a) < listKey(b) }

// listKey is the sort key of a list element: an object's "type" or "name", a string itself, else its printed
// value.
func listKey(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case map[string]any:
		for _, k := range []string{"type", "name"} {
			if s, ok := t[k].(string); ok {
				return s
			}
		}
	}
	return fmt.Sprint(v)
}

// podUIDs returns the UIDs of the case's pods by name.
func podUIDs(c *suite.Case) map[string]types.UID {
	GinkgoHelper()
	pods := &corev1.PodList{}
	Expect(c.List(pods)).To(Succeed())
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		out[p.Name] = p.UID
	}
	return out
}

// settleShards waits until exactly the named Shards exist, each Healthy on its current generation, the
// cluster is Healthy on its current generation, and the namespace is quiet for 500 ms (a not-converged shard
// requeues every 50 ms here).
func settleShards(c *suite.Case, cluster string, shards []string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		list := &mgv1.ShardList{}
		g.Expect(c.List(list)).To(Succeed())
		var names []string
		for _, sh := range list.Items {
			names = append(names, sh.Name)
			g.Expect(sh.Status.Phase).To(Equal(mgv1.PhaseHealthy), "shard %s: %s", sh.Name, sh.Status.Message)
			g.Expect(sh.Status.ObservedGeneration).To(Equal(sh.Generation), "shard %s", sh.Name)
		}
		g.Expect(names).To(ConsistOf(shards))
		mc := &mgv1.MultigresCluster{}
		g.Expect(c.Get(cluster, mc)).To(Succeed())
		g.Expect(mc.Status.Phase).To(Equal(mgv1.PhaseHealthy))
		g.Expect(mc.Status.ObservedGeneration).To(Equal(mc.Generation))
	}).WithTimeout(healthyTimeout).Should(Succeed(), "the cluster never settled with shards %v", shards)
	c.RequireQuiescent(500*time.Millisecond, 30*time.Second)
}

// handshake is where, in resourceVersions, one retired object went through the pending-deletion handshake: its
// annotation, its ReadyForDeletion=True, its deletionTimestamp and its Deleted change (0: not seen).
type handshake struct{ annotated, ready, deleting, gone int64 }

// retirement reads the handshake of kind/name from the event stream since since.
func retirement(c *suite.Case, kind, name string, since time.Time) handshake {
	GinkgoHelper()
	changes := c.Changes(suite.ChangeFilter{Kind: kind, Name: name, Since: since})
	h := handshake{deleting: deletionStart(changes)}
	for _, ch := range changes {
		if ch.Type == suite.Deleted {
			h.gone = rv(ch)
		}
		for _, f := range ch.Fields {
			switch {
			case h.annotated == 0 && f.Path == "metadata.annotations."+multigres.AnnotationPendingDeletion && f.New == "true":
				h.annotated = rv(ch)
			case h.ready == 0 && f.Path == "status.conditions[type="+mgv1.ConditionReadyForDeletion+"].status" && f.New == "True":
				h.ready = rv(ch)
			}
		}
	}
	return h
}

// expectHandshake checks that kind/name was annotated pending-deletion, then reported ReadyForDeletion=True,
// then was deleted, in that order; it returns the handshake.
func expectHandshake(c *suite.Case, kind, name string, since time.Time) handshake {
	GinkgoHelper()
	h := retirement(c, kind, name, since)
	Expect([]int64{h.annotated, h.ready, h.deleting, h.gone}).To(HaveEach(BeNumerically(">", 0)),
		"%s %s: a step of the handshake was not observed (annotated, ReadyForDeletion, deletionTimestamp, Deleted at rv %+v)", kind, name, h)
	Expect(h.annotated).To(BeNumerically("<", h.ready), "%s %s reported ReadyForDeletion before it was annotated", kind, name)
	Expect(h.ready).To(BeNumerically("<", h.deleting), "%s %s was deleted before it reported ReadyForDeletion", kind, name)
	Expect(h.deleting).To(BeNumerically("<", h.gone))
	return h
}

// expectPodsGoneBefore checks that every pod the event stream saw of shard (by name prefix "<shard>-") was
// deleted before rv.
func expectPodsGoneBefore(c *suite.Case, shard string, before int64, since time.Time) {
	GinkgoHelper()
	n := 0
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Pod", Type: suite.Deleted, Since: since}) {
		if len(ch.Name) > len(shard) && ch.Name[:len(shard)+1] == shard+"-" {
			n++
			Expect(rv(ch)).To(BeNumerically("<", before), "pod %s of shard %s deleted after the shard reported ReadyForDeletion", ch.Name, shard)
		}
	}
	Expect(n).To(BeNumerically(">", 0), "no pod of shard %s was deleted", shard)
}

// setTableGroups writes tgs as the cluster's first database's table groups (one write) and returns when the
// write succeeded.
func setTableGroups(c *suite.Case, cluster string, tgs []mgv1.TableGroupTemplate) {
	GinkgoHelper()
	mc := &mgv1.MultigresCluster{}
	Expect(c.Update(cluster, mc, func() {
		mc.Spec.Databases[0].TableGroups = tgs
	})).To(Succeed())
}

// roundTrip is one A -> B -> A transition: the cluster spec A, the table groups of B, the Shards each state
// settles with, the changes each direction permits (a closed-world step each), and the check of the retirement
// B makes, for the order of each retired object's own updates, which a step cannot permit apart.
type roundTrip struct {
	cluster         *mgv1.MultigresCluster
	b               []mgv1.TableGroupTemplate
	shardsA         []string
	shardsB         []string
	retire, restore suite.Permit
	checkRetiredFn  func(c *suite.Case, since time.Time)
}

// run creates A, settles it, goes to B, checks the retirement, goes back to A and checks that the namespace is
// as it was in A, and that the pods B kept are the same pods. Each direction is a script of one step.
func (rt roundTrip) run(c *suite.Case) {
	GinkgoHelper()
	a := rt.cluster.DeepCopy().Spec.Databases[0].TableGroups
	allowElectionOrder(c, suite.Objects{Kind: "Shard"})
	Expect(c.Create(rt.cluster)).To(Succeed())
	settleShards(c, rt.cluster.Name, rt.shardsA)
	before := roundTripSnapshot(c)
	uidsA := podUIDs(c)

	By("A -> B")
	toB := time.Now()
	transition(c, rt.cluster.Name, "A -> B", rt.b, rt.retire, rt.shardsB)
	rt.checkRetiredFn(c, toB)
	kept := podUIDs(c)

	By("B -> A")
	transition(c, rt.cluster.Name, "B -> A", a, rt.restore, rt.shardsA)
	after := roundTripSnapshot(c)
	Expect(slices.Sorted(maps.Keys(after))).To(Equal(slices.Sorted(maps.Keys(before))), "A -> B -> A: not the same objects by name")
	ignore := cmpopts.IgnoreMapEntries(func(k string, _ any) bool { return roundTripIgnored[k] })
	if d := cmp.Diff(before, after, ignore, cmpopts.SortSlices(listOrder)); d != "" {
		Fail("A -> B -> A: the objects differ from A's (-A +A again):\n" + d)
	}
	uidsAgain := podUIDs(c)
	for name, uid := range kept {
		Expect(uidsAgain[name]).To(Equal(uid), "pod %s, which B kept, was replaced on the way back to A", name)
		Expect(uidsA[name]).To(Equal(uid), "pod %s, which B kept, was replaced on the way to B", name)
	}
	Expect(failedPasses(c)).To(BeEmpty(), "A -> B -> A made passes fail")
	AddReportEntry("round trip", fmt.Sprintf("%d objects equal after A -> B -> A; %d pods kept through B", len(after), len(kept)))
}

// transition writes tgs as the cluster's first database's table groups in a script of one step that permits
// exactly permit, waits until the cluster settles with shards, and finishes the script.
func transition(c *suite.Case, cluster, name string, tgs []mgv1.TableGroupTemplate, permit suite.Permit, shards []string) {
	GinkgoHelper()
	sc := c.Script(name)
	sc.RequireStep(name, func() error { setTableGroups(c, cluster, tgs); return nil }, permit)
	settleShards(c, cluster, shards)
	sc.RequireFinish(afterQuiet)
}

var _ = Describe("multigres transitions", Label("multigres"), func() {
	It("a shard removed from a live cluster goes through the pending-deletion handshake, and A -> B -> A returns the same objects (over 3 s: three states, each settled with 500 ms of quiet, and a handshake that drains pods)", shardRoundTripSpec)

	It("a table group removed from a live cluster retires its shard, then itself, and A -> B -> A returns the same objects (over 3 s: three states, each settled with 500 ms of quiet, and two handshakes, the shard's draining its pods)", tableGroupRoundTripSpec)
})

// defaultCluster returns the fixtures' default cluster (one database, table group and shard) and its names,
// for a spec to extend before creating it.
func defaultCluster() (*mgv1.MultigresCluster, fixtures.MultigresNames) {
	GinkgoHelper()
	spec := fixtures.MultigresSpec{}
	cluster, err := fixtures.Multigres(spec)
	Expect(err).NotTo(HaveOccurred())
	return cluster, spec.Names()
}

// twoShards returns the fixtures' default cluster with a second shard "1" in its table group (a copy of the
// first), its names (of the first shard's tree) and the second shard.
func twoShards() (*mgv1.MultigresCluster, fixtures.MultigresNames, mgv1.ShardTemplate) {
	GinkgoHelper()
	cluster, names := defaultCluster()
	tg := &cluster.Spec.Databases[0].TableGroups[0]
	second := *tg.Shards[0].DeepCopy()
	second.Name = "1"
	tg.Shards = append(tg.Shards, second)
	return cluster, names, second
}

// twoTableGroups returns the fixtures' default cluster with a second table group "tg2" in its database (a copy
// of the first, one shard), its names (of the first table group's tree) and the second table group.
func twoTableGroups() (*mgv1.MultigresCluster, fixtures.MultigresNames, mgv1.TableGroupTemplate) {
	GinkgoHelper()
	cluster, names := defaultCluster()
	db := &cluster.Spec.Databases[0]
	second := *db.TableGroups[0].DeepCopy()
	second.Name = "tg2"
	db.TableGroups = append(db.TableGroups, second)
	return cluster, names, second
}

// shardRoundTripSpec runs A = one table group of shards 0 and 1, B = shard 0 only. A -> B permits the cluster's
// and the table group's spec edits and shard 1's retirement (its annotation, its pods drained and deleted, then
// itself), B -> A the edits and shard 1's tree created anew; shard 0 and its pods may not change either way.
func shardRoundTripSpec() {
	c := s.NewCase(GinkgoT())
	cluster, names, second := twoShards()
	tg := &cluster.Spec.Databases[0].TableGroups[0]
	b := cluster.DeepCopy().Spec.Databases[0].TableGroups
	b[0].Shards = b[0].Shards[:1]
	retiredTree := shardTree(names.TableGroup, second)
	retired := retiredTree.name
	parents := func(p suite.Permit) suite.Permit {
		return suite.Before(edited("MultigresCluster", names.Cluster), suite.Before(edited("TableGroup", names.TableGroup), p))
	}

	roundTrip{cluster: cluster, b: b, shardsA: []string{names.Shard, retired}, shardsB: []string{names.Shard},
		retire: parents(gone(retiredTree, retiredFields)), restore: parents(created(retiredTree)),
		checkRetiredFn: func(c *suite.Case, since time.Time) {
			h := expectHandshake(c, "Shard", retired, since)
			expectPodsGoneBefore(c, retired, h.ready, since)
			Expect(deletedBy(c, "Shard", retired, since)).To(Equal([]string{shardTableGroupWriter}), "who deleted shard %s", retired)
			expectPoolersShutDown(c, topo.ShardKey{Database: cluster.Spec.Databases[0].Name, TableGroup: tg.Name, Shard: second.Name})
		}}.run(c)
}

// tableGroupRoundTripSpec runs A = table groups tg and tg2 (one shard each), B = tg only. A -> B permits the
// cluster's spec edit and tg2's retirement with its shard's; B -> A the edit and tg2's tree created anew; tg, its
// shard and their pods may not change either way.
func tableGroupRoundTripSpec() {
	c := s.NewCase(GinkgoT())
	cluster, names, second := twoTableGroups()
	db := &cluster.Spec.Databases[0]
	b := cluster.DeepCopy().Spec.Databases[0].TableGroups[:1]
	retiredTree := tableGroupTree(cluster.Name, db.Name, second)
	retiredTG, retiredShard := retiredTree.name, retiredTree.children[0].name
	parent := func(p suite.Permit) suite.Permit { return suite.Before(edited("MultigresCluster", names.Cluster), p) }

	roundTrip{cluster: cluster, b: b, shardsA: []string{names.Shard, retiredShard}, shardsB: []string{names.Shard},
		retire: parent(gone(retiredTree, retiredFields)), restore: parent(created(retiredTree)),
		checkRetiredFn: func(c *suite.Case, since time.Time) {
			tgh := expectHandshake(c, "TableGroup", retiredTG, since)
			sh := expectHandshake(c, "Shard", retiredShard, since)
			expectPodsGoneBefore(c, retiredShard, sh.ready, since)
			Expect(tgh.annotated).To(BeNumerically("<", sh.annotated), "the shard was retired before its table group")
			Expect(sh.gone).To(BeNumerically("<", tgh.ready), "table group %s reported ReadyForDeletion while its shard was there", retiredTG)
			Expect(deletedBy(c, "TableGroup", retiredTG, since)).To(Equal([]string{"multigres/" + multigres.ClusterControllerName}))
			expectPoolersShutDown(c, topo.ShardKey{Database: db.Name, TableGroup: second.Name, Shard: second.Shards[0].Name})
		}}.run(c)
}

// expectPoolersShutDown fails unless every pooler topology lists for shard key is SHUTDOWN, and at least one is
// listed: a retired shard's pods are gone, and a SERVING pooler left behind would still be offered traffic.
func expectPoolersShutDown(c *suite.Case, key topo.ShardKey) {
	GinkgoHelper()
	var all, serving []string
	for _, pl := range topology.Snapshot(c.Namespace) {
		if pl.Key != key {
			continue
		}
		all = append(all, pl.Name)
		if pl.Lifecycle != topo.LifecycleShutdown {
			serving = append(serving, pl.Name+" "+pl.Lifecycle)
		}
	}
	Expect(all).NotTo(BeEmpty(), "topology lists no pooler of shard %+v: it never registered one", key)
	Expect(serving).To(BeEmpty(), "shard %+v was retired, yet topology still lists poolers of its deleted pods as serving", key)
}

// deletedBy lists the writers ("manager/controller") of the successful deletes of kind/name since since.
func deletedBy(c *suite.Case, kind, name string, since time.Time) []string {
	var out []string
	for _, w := range c.Writes(suite.WriteFilter{Kind: kind, Name: name, Verb: suite.VerbDelete, Since: since}) {
		out = append(out, w.Manager+"/"+w.Controller)
	}
	return out
}
