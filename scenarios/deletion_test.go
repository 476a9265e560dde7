package scenarios

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/fixtures"
	"github.com/ensembletest/ensemble/operators/matrixone"
	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
	"github.com/ensembletest/ensemble/suite"
)

// Cascading deletion of a reference operator's objects by kube-controller-manager's garbage collector, which
// suite.Boot runs beside envtest, next to the operator's own finalizers.
var _ = Describe("deletion", Label("matrixone", "deletion"), func() {
	It("foreground deletion: a ProxySet's pods and ConfigMap are deleted before the ProxySet, which carries foregroundDeletion meanwhile", foregroundDeletionSpec)

	// The pod set's finalize (operators/matrixone/podset.go) deletes the pods the set still controls and its
	// ConfigMap by name. With the operator reconciling while the GC orphans, the two race: in a trial run the
	// operator's pod delete landed one resourceVersion before the GC's orphaning patch, and it deleted the
	// already orphaned ConfigMap. So the operator instance of this case is down while the GC orphans, and a
	// second instance releases the finalizer afterwards: it must leave the orphans alone.
	It("orphan propagation: a DNSet's pods stay, without its owner reference, and the DNSet goes", orphanDeletionSpec)
})

// dependents lists, as "Kind/name", the case's pods and ConfigMaps that carry an owner reference to owner.
func dependents(c *suite.Case, owner client.Object) []string {
	GinkgoHelper()
	pods, cms := &corev1.PodList{}, &corev1.ConfigMapList{}
	Expect(c.List(pods)).To(Succeed())
	Expect(c.List(cms)).To(Succeed())
	var out []string
	owns := func(o metav1.Object) bool {
		return slices.ContainsFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner.GetUID() })
	}
	for i := range pods.Items {
		if owns(&pods.Items[i]) {
			out = append(out, "Pod/"+pods.Items[i].Name)
		}
	}
	for i := range cms.Items {
		if owns(&cms.Items[i]) {
			out = append(out, "ConfigMap/"+cms.Items[i].Name)
		}
	}
	return out
}

// rv is a change's resourceVersion as a number (the etcd revision that made it).
func rv(ch suite.Change) int64 {
	GinkgoHelper()
	n, err := strconv.ParseInt(ch.ResourceVersion, 10, 64)
	Expect(err).NotTo(HaveOccurred(), "resourceVersion of %s", ch)
	return n
}

var rvNumber = regexp.MustCompile(`^rv (\d+)`)

// rvPrefix reads the number of a line that starts with "rv <n>".
func rvPrefix(line string) int {
	n, _ := strconv.Atoi(rvNumber.FindStringSubmatch(line)[1])
	return n
}

// deletionStart is the resourceVersion of the change that set the object's deletionTimestamp; 0 if none.
func deletionStart(changes []suite.Change) int64 {
	GinkgoHelper()
	for _, ch := range changes {
		for _, f := range ch.Fields {
			if f.Path == "metadata.deletionTimestamp" && f.Old == "<absent>" {
				return rv(ch)
			}
		}
	}
	return 0
}

// span is a range of resourceVersions: from the change that added something to the one that removed it (or
// the object's Deleted change).
type span struct{ from, to int64 }

// finalizerSpans replays an object's changes (all of them, from its Added change, ordered by
// resourceVersion) into its finalizer list and returns the spans during which it held finalizer.
func finalizerSpans(changes []suite.Change, finalizer string) []span {
	GinkgoHelper()
	// A finalizer is a set element: its path is metadata.finalizers[<finalizer>] (see suite's field paths).
	path := "metadata.finalizers[" + finalizer + "]"
	var out []span
	holding, has := false, false
	for _, ch := range changes {
		for _, f := range ch.Fields {
			if f.Path == path {
				has = f.New != "<absent>"
			}
		}
		if ch.Type == suite.Deleted {
			has = false
		}
		switch {
		case has && !holding:
			out = append(out, span{from: rv(ch)})
		case !has && holding:
			out[len(out)-1].to = rv(ch)
		}
		holding = has
	}
	return out
}

// medianMax returns the median (the lower middle one of an even count) and the largest of ds (not empty).
func medianMax(ds []time.Duration) (time.Duration, time.Duration) {
	sorted := slices.Sorted(slices.Values(ds))
	return sorted[(len(sorted)-1)/2], sorted[len(sorted)-1]
}

// foregroundDeletionSpec deletes a ProxySet in the foreground and checks the order of the deletions.
func foregroundDeletionSpec(ctx SpecContext) {
	c := s.NewCase(GinkgoT())
	spec := fixtures.MatrixOneSpec{PoolMaxIdle: ptr.To[int32](0), ProxySetReplicas: ptr.To[int32](2)}
	bringUpMatrixOne(ctx, c, spec)
	ps := &mov1.ProxySet{}
	Expect(c.Get(spec.Names().ProxySet, ps)).To(Succeed())
	children := dependents(c, ps)
	Expect(children).To(HaveLen(int(*spec.ProxySetReplicas)+1), "the ProxySet's pods and its ConfigMap: %v", children)
	Expect(children).To(ContainElement("ConfigMap/" + matrixone.ConfigMapName(ps.Name)))

	By("deleting the ProxySet with propagationPolicy Foreground")
	deleted := time.Now()
	Expect(c.Delete(ps, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ps.Name, &mov1.ProxySet{}))).To(BeTrue(), "the ProxySet is still there")
		g.Expect(dependents(c, ps)).To(BeEmpty())
	}).WithTimeout(30 * time.Second).WithContext(ctx).Should(Succeed())

	By("reading the order from the event stream")
	changes := c.Changes(suite.ChangeFilter{Since: deleted})
	gone := map[string]int64{}
	for _, ch := range changes {
		if ch.Type == suite.Deleted {
			gone[ch.Kind+"/"+ch.Name] = rv(ch)
		}
	}
	owner := gone["ProxySet/"+ps.Name]
	Expect(owner).NotTo(BeZero(), "no Deleted change of the ProxySet")
	spans := finalizerSpans(c.Changes(suite.ChangeFilter{Kind: "ProxySet", Name: ps.Name}), metav1.FinalizerDeleteDependents)
	Expect(spans).To(HaveLen(1), "foregroundDeletion on the ProxySet, [added..removed] in resourceVersions")
	fg := spans[0]
	start := deletionStart(c.Changes(suite.ChangeFilter{Kind: "ProxySet", Name: ps.Name, Since: deleted}))
	Expect(fg.from).To(Equal(start), "foregroundDeletion came with the deletionTimestamp")
	Expect(fg.to).To(BeNumerically("<=", owner))
	last := int64(0)
	for _, ch := range children {
		at, ok := gone[ch]
		Expect(ok).To(BeTrue(), "no Deleted change of %s", ch)
		Expect(at).To(BeNumerically(">", start), "%s deleted before its owner's deletion began", ch)
		Expect(at).To(BeNumerically("<", fg.to), "%s deleted after foregroundDeletion left the ProxySet", ch)
		Expect(at).To(BeNumerically("<", owner), "%s deleted after the ProxySet", ch)
		last = max(last, at)
	}
	var byOperator []string
	for _, w := range c.Writes(suite.WriteFilter{Verb: suite.VerbDelete, Manager: "matrixone", Since: deleted}) {
		byOperator = append(byOperator, w.Kind+"/"+w.Name)
	}
	order := []string{fmt.Sprintf("rv %d ProxySet deletionTimestamp + foregroundDeletion", start)}
	for _, ch := range children {
		order = append(order, fmt.Sprintf("rv %d %s Deleted", gone[ch], ch))
	}
	order = append(order, fmt.Sprintf("rv %d foregroundDeletion removed", fg.to), fmt.Sprintf("rv %d ProxySet Deleted", owner))
	slices.SortFunc(order, func(a, b string) int { return rvPrefix(a) - rvPrefix(b) })
	AddReportEntry("foreground deletion order", strings.Join(order, "; ")+
		fmt.Sprintf("; owner gone %s after the delete; deletes the operator's finalizer made itself: %s",
			time.Since(deleted).Round(time.Millisecond), strings.Join(byOperator, ", ")), ReportEntryVisibilityAlways)
	c.RequireQuiescent(500*time.Millisecond, 30*time.Second)
}

// orphanDeletionSpec deletes a DNSet with orphan propagation and checks that its pods stay, unowned.
func orphanDeletionSpec(ctx SpecContext) {
	c := s.NewCase(GinkgoT(), suite.Unadmitted())
	opts := scopedOptions(c.Namespace, moOptions.ConfigRevision, true)
	first := operatorInstance(c, "mo-orphan-1", opts)
	spec := fixtures.MatrixOneSpec{PoolMaxIdle: ptr.To[int32](0), DNSetReplicas: ptr.To[int32](2)}
	bringUpMatrixOne(ctx, c, spec)
	dn := &mov1.DNSet{}
	Expect(c.Get(spec.Names().DNSet, dn)).To(Succeed())
	Expect(dn.Finalizers).To(ContainElement(matrixone.FinalizerPrefix + matrixone.DNSetControllerName))
	pods := map[string]types.UID{}
	for _, d := range dependents(c, dn) {
		if name, ok := strings.CutPrefix(d, "Pod/"); ok {
			p := &corev1.Pod{}
			Expect(c.Get(name, p)).To(Succeed())
			pods[name] = p.UID
		}
	}
	Expect(pods).To(HaveLen(2))

	By("deleting the DNSet with propagationPolicy Orphan while its operator is down")
	Expect(first.Stop()).To(Succeed())
	deleted := time.Now()
	Expect(c.Delete(dn, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	Eventually(func(g Gomega) {
		got := &mov1.DNSet{}
		g.Expect(c.Get(dn.Name, got)).To(Succeed())
		g.Expect(got.DeletionTimestamp).NotTo(BeNil())
		g.Expect(got.Finalizers).NotTo(ContainElement(metav1.FinalizerOrphanDependents), "the GC has not orphaned yet")
		g.Expect(got.Finalizers).To(ContainElement(matrixone.FinalizerPrefix + matrixone.DNSetControllerName))
	}).WithTimeout(30 * time.Second).WithContext(ctx).Should(Succeed())
	orphaned := time.Since(deleted)
	Expect(dependents(c, dn)).To(BeEmpty(), "the GC removed the orphan finalizer before every owner reference")

	By("a second operator instance releases the DNSet's finalizer")
	second := time.Now()
	operatorInstance(c, "mo-orphan-2", opts)
	Eventually(func() bool { return apierrors.IsNotFound(c.Get(dn.Name, &mov1.DNSet{})) }).
		WithTimeout(30*time.Second).WithContext(ctx).Should(BeTrue(), "the DNSet is still there")
	released := time.Since(second)
	Consistently(func(g Gomega) {
		for name, uid := range pods {
			p := &corev1.Pod{}
			g.Expect(c.Get(name, p)).To(Succeed(), "orphaned pod %s", name)
			g.Expect(p.UID).To(Equal(uid), "pod %s was replaced", name)
			g.Expect(p.DeletionTimestamp).To(BeNil(), "orphaned pod %s is being deleted", name)
			g.Expect(p.OwnerReferences).NotTo(ContainElement(HaveField("UID", dn.UID)), "pod %s", name)
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", name)
		}
	}).WithTimeout(300 * time.Millisecond).WithContext(ctx).Should(Succeed())

	By("reading the stream: each pod lost its owner reference before the DNSet went, and none was deleted")
	changes := c.Changes(suite.ChangeFilter{Since: deleted})
	var dnGone int64
	unowned := map[string]int64{}
	for _, ch := range changes {
		switch {
		case ch.Kind == "DNSet" && ch.Type == suite.Deleted:
			dnGone = rv(ch)
		case ch.Kind == "Pod" && pods[ch.Name] != "":
			Expect(ch.Type).NotTo(Equal(suite.Deleted), "orphaned pod %s was deleted", ch.Name)
			for _, f := range ch.Fields {
				Expect(f.Path).NotTo(Equal("metadata.deletionTimestamp"), "orphaned pod %s was deleted: %s", ch.Name, ch)
				if f.Path == "metadata.ownerReferences[uid="+string(dn.UID)+"].uid" && f.New == "<absent>" {
					unowned[ch.Name] = rv(ch)
				}
			}
		}
	}
	Expect(dnGone).NotTo(BeZero(), "no Deleted change of the DNSet")
	for name := range pods {
		Expect(unowned).To(HaveKey(name), "no change removed the DNSet's owner reference from pod %s", name)
		Expect(unowned[name]).To(BeNumerically("<", dnGone))
	}
	cmName := matrixone.ConfigMapName(dn.Name)
	cmFate := "kept"
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: "ConfigMap", Name: cmName, Since: deleted}) {
		for _, f := range ch.Fields {
			if f.Path == "metadata.ownerReferences[uid="+string(dn.UID)+"].uid" && f.New == "<absent>" {
				cmFate = fmt.Sprintf("orphaned at rv %d", rv(ch))
			}
		}
		if ch.Type == suite.Deleted {
			cmFate += fmt.Sprintf(", deleted at rv %d", rv(ch))
		}
	}
	for _, w := range c.Writes(suite.WriteFilter{Kind: "ConfigMap", Name: cmName, Verb: suite.VerbDelete, Since: deleted}) {
		cmFate += " by " + w.Manager + "/" + w.Controller + " (its finalize deletes the ConfigMap by name, owned or not)"
	}
	AddReportEntry("orphan propagation", fmt.Sprintf("owner references removed and orphan finalizer gone %s after the delete (pods at rv %v); "+
		"second operator released the DNSet in %s (gone at rv %d); ConfigMap %s",
		orphaned.Round(time.Millisecond), unowned, released.Round(time.Millisecond), dnGone, cmFate), ReportEntryVisibilityAlways)
}
