package clusterapi_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/test/builder"

	clusterapi "github.com/ensembletest/ensemble/examples/cluster-api"
	"github.com/ensembletest/ensemble/suite"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// bootstrapSecret is the bootstrap data every Machine names in spec.bootstrap.dataSecretName; no bootstrap
// provider runs.
const bootstrapSecret = "bootstrap-data"

// eventually polls fn for up to 60 s.
func eventually(fn func(g Gomega)) AsyncAssertion {
	return Eventually(fn).WithTimeout(60 * time.Second).WithPolling(50 * time.Millisecond)
}

// infraRef is an object of the fake provider's kind and name, as cluster-api's builders take references.
func infraRef(kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterapi.InfraGroupVersion.WithKind(kind))
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// provisionCluster creates what a cluster-api user creates for a Cluster on the fake provider (a FakeCluster,
// the Cluster, the bootstrap data Secret, and the kubeconfig Secret of the workload cluster, which is the
// envtest itself, made with cluster-api's util/kubeconfig) and waits for the Cluster to be provisioned and
// connected. Then it adds a control-plane Machine "cp-0" (no control plane provider runs: cluster-api
// initializes such a Cluster's control plane when a control-plane Machine has a Node, and holds worker
// Machines' NodeHealthy until then) and waits for the control plane to be initialized. It returns the Cluster
// and how long it took to be provisioned.
func provisionCluster(c *suite.Case, name string) (*clusterv1.Cluster, time.Duration) {
	GinkgoHelper()
	Expect(c.Create(&clusterapi.FakeCluster{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	cl := builder.Cluster(c.Namespace, name).WithInfrastructureCluster(infraRef("FakeCluster", c.Namespace, name)).Build()
	Expect(c.Create(cl)).To(Succeed())
	Expect(c.Create(kubeconfig.GenerateSecret(cl, kubeconfig.FromEnvTestConfig(s.Config, cl)))).To(Succeed())
	Expect(c.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: bootstrapSecret},
		Data: map[string][]byte{"value": []byte("#!/bin/sh\n"), "format": []byte("cloud-config")}})).To(Succeed())
	eventually(func(g Gomega) {
		g.Expect(c.Get(name, cl)).To(Succeed())
		g.Expect(cl.Status.Phase).To(Equal(string(clusterv1.ClusterPhaseProvisioned)))
		g.Expect(cl.Status.Initialization.InfrastructureProvisioned).To(HaveValue(BeTrue()))
		g.Expect(conditions.IsTrue(cl, clusterv1.ClusterRemoteConnectionProbeCondition)).To(BeTrue(),
			"RemoteConnectionProbe: %v", conditions.Get(cl, clusterv1.ClusterRemoteConnectionProbeCondition))
	}).Should(Succeed())
	provisioned := time.Since(c.Started)

	Expect(c.Create(&clusterapi.FakeMachine{ObjectMeta: metav1.ObjectMeta{Name: "cp-0"}})).To(Succeed())
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Labels: map[string]string{
		clusterv1.ClusterNameLabel: cl.Name, clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{ClusterName: cl.Name, Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(bootstrapSecret)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: clusterapi.InfraGroup, Kind: "FakeMachine", Name: "cp-0"}}}
	Expect(c.Create(m)).To(Succeed())
	eventually(func(g Gomega) {
		expectMachinesRunning(g, c, client.HasLabels{clusterv1.MachineControlPlaneLabel}, 1)
		g.Expect(c.Get(name, cl)).To(Succeed())
		g.Expect(conditions.IsTrue(cl, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue(),
			"ControlPlaneInitialized: %v", conditions.Get(cl, clusterv1.ClusterControlPlaneInitializedCondition))
	}).Should(Succeed())
	return cl, provisioned
}

// machineDeployment creates FakeMachineTemplate template (if it is not there) and MachineDeployment name of
// cluster with replicas Machines booted from the bootstrap data Secret.
func machineDeployment(c *suite.Case, cluster, name, template string, replicas int32) *clusterv1.MachineDeployment {
	GinkgoHelper()
	createTemplate(c, template)
	md := builder.MachineDeployment(c.Namespace, name).WithClusterName(cluster).
		WithInfrastructureTemplate(infraRef("FakeMachineTemplate", c.Namespace, template)).WithReplicas(replicas).Build()
	md.Spec.Template.Spec.Bootstrap.DataSecretName = ptr.To(bootstrapSecret)
	Expect(c.Create(md)).To(Succeed())
	return md
}

// createTemplate creates FakeMachineTemplate name unless it exists.
func createTemplate(c *suite.Case, name string) {
	GinkgoHelper()
	err := c.Create(&clusterapi.FakeMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// expectRolledOut waits until MachineDeployment name has replicas Machines, all up to date, available and
// Running with a Ready Node, and no other Machine exists; it returns the Machines.
func expectRolledOut(c *suite.Case, name string, replicas int32) []clusterv1.Machine {
	GinkgoHelper()
	var machines []clusterv1.Machine
	eventually(func(g Gomega) {
		md := &clusterv1.MachineDeployment{}
		g.Expect(c.Get(name, md)).To(Succeed())
		g.Expect(md.Status.ObservedGeneration).To(Equal(md.Generation))
		g.Expect(md.Status.Replicas).To(HaveValue(Equal(replicas)))
		g.Expect(md.Status.UpToDateReplicas).To(HaveValue(Equal(replicas)))
		g.Expect(md.Status.AvailableReplicas).To(HaveValue(Equal(replicas)))
		machines = expectMachinesRunning(g, c, client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: name}, int(replicas))
	}).Should(Succeed())
	return machines
}

// expectMachinesRunning checks that the namespace holds n Machines matching sel, each Running with a
// nodeRef to a Node that carries its providerID and reports NodeHealthy, and that every Machine of the
// namespace has a Node of the case and no other Node is left; it returns the Machines matching sel.
func expectMachinesRunning(g Gomega, c *suite.Case, sel client.ListOption, n int) []clusterv1.Machine {
	list := &clusterv1.MachineList{}
	g.Expect(c.List(list, sel)).To(Succeed())
	g.Expect(list.Items).To(HaveLen(n))
	for _, m := range list.Items {
		g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has no nodeRef", m.Name)
		g.Expect(conditions.IsTrue(&m, clusterv1.MachineNodeHealthyCondition)).To(BeTrue(), "Machine %s NodeHealthy: %v",
			m.Name, conditions.Get(&m, clusterv1.MachineNodeHealthyCondition))
		node := &corev1.Node{}
		g.Expect(c.Get(m.Status.NodeRef.Name, node)).To(Succeed())
		g.Expect(node.Spec.ProviderID).To(Equal(m.Spec.ProviderID))
	}
	all := count(c, &clusterv1.MachineList{})
	g.Expect(count(c, &corev1.NodeList{})).To(Equal(all), "the case's Nodes, one per Machine")
	return list.Items
}

// finish requires the case's namespace to be quiescent for 1 s and reports its passes and writes.
func finish(c *suite.Case) {
	GinkgoHelper()
	c.RequireQuiescent(time.Second, 30*time.Second)
	report(c)
}

// withWorkers provisions Cluster cluster with a MachineDeployment "workers" of replicas Machines from
// FakeMachineTemplate "small", rolled out; it returns the Cluster and the Machines.
func withWorkers(c *suite.Case, cluster string, replicas int32) (*clusterv1.Cluster, []clusterv1.Machine) {
	GinkgoHelper()
	// The MachineDeployment controller applies each MachineSet with its finalizers carried over ("Preserve all
	// existing finalizers", core/reconcilers/machinedeployment/machinedeployment_rollout_planner.go:260-261 at
	// v1.14.2, internal/controllers/machinedeployment/ at v1.13.5), so its field manager co-owns the MachineSet
	// controller's own finalizer, which that controller adds (core/reconcilers/machineset/
	// machineset_controller.go:201 at v1.14.2, internal/controllers/machineset/machineset_controller.go:189 at
	// v1.13.5): shared on purpose.
	c.AllowSharedField(suite.Objects{Kind: "MachineSet", OwnerKind: "MachineDeployment"}, "metadata.finalizers[cluster.x-k8s.io/machineset]",
		"the MachineDeployment controller's apply carries the MachineSet's finalizers over (machinedeployment_rollout_planner.go:260-261)")
	cl, _ := provisionCluster(c, cluster)
	machineDeployment(c, cluster, "workers", "small", replicas)
	return cl, expectRolledOut(c, "workers", replicas)
}

// report adds the case's passes per controller and writes per writer as a report entry, and counts them
// for the suite's totals.
func report(c *suite.Case) {
	passes, writes := map[string]int{}, map[string]int{}
	for _, m := range []string{clusterapi.ManagerName, clusterapi.FakeInfraManagerName} {
		for _, p := range c.Passes(suite.PassFilter{Manager: m}) {
			passes[p.Manager+"/"+p.Controller]++
		}
	}
	for _, w := range c.Writes(suite.WriteFilter{IncludeRejected: true}) {
		writes[w.Manager+"/"+w.Controller+" "+string(w.Verb)]++
	}
	totals.Lock()
	for k, n := range passes {
		totals.passes[k] += n
	}
	for k, n := range writes {
		totals.writes[k] += n
	}
	totals.Unlock()
	AddReportEntry("passes per controller", counts(passes), ReportEntryVisibilityAlways)
	AddReportEntry("writes per writer", counts(writes), ReportEntryVisibilityAlways)
}

// fieldWriters renders c.FieldWriters(kind, name) as sorted "path: writers" lines.
func fieldWriters(c *suite.Case, kind, name string) string {
	var lines []string
	for path, who := range c.FieldWriters(kind, name) {
		lines = append(lines, path+": "+strings.Join(who, ", "))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// oneMachineSetEach is an invariant: each MachineDeployment of the namespace owns at most one MachineSet that
// is not being deleted. Scaling resizes the MachineSet there is; only a template change makes another.
func oneMachineSetEach(ctx context.Context, r client.Reader, namespace string) error {
	sets := &clusterv1.MachineSetList{}
	if err := r.List(ctx, sets, client.InNamespace(namespace)); err != nil {
		return err
	}
	owned := map[string][]string{}
	for _, ms := range sets.Items {
		if ms.DeletionTimestamp != nil {
			continue
		}
		for _, o := range ms.OwnerReferences {
			if o.Kind == "MachineDeployment" {
				owned[o.Name] = append(owned[o.Name], ms.Name)
			}
		}
	}
	for md, names := range owned {
		if len(names) > 1 {
			sort.Strings(names)
			return fmt.Errorf("MachineDeployment %s owns %d MachineSets at once: %s", md, len(names), strings.Join(names, ", "))
		}
	}
	return nil
}

// scale sets MachineDeployment name's replicas.
func scale(c *suite.Case, name string, replicas int32) {
	GinkgoHelper()
	md := &clusterv1.MachineDeployment{}
	Expect(c.Update(name, md, func() { md.Spec.Replicas = ptr.To(replicas) })).To(Succeed())
}

// setPaused sets Cluster name's spec.paused.
func setPaused(c *suite.Case, name string, paused bool) {
	GinkgoHelper()
	cl := &clusterv1.Cluster{}
	Expect(c.Update(name, cl, func() { cl.Spec.Paused = ptr.To(paused) })).To(Succeed())
}

var _ = Describe("cluster-api", func() {
	It("a Cluster is provisioned and its control-plane Machine gets a Ready Node", func() {
		c := s.NewCase(GinkgoT())
		cl, provisioned := provisionCluster(c, "demo")
		fc := &clusterapi.FakeCluster{}
		Expect(c.Get("demo", fc)).To(Succeed())
		Expect(cl.Spec.ControlPlaneEndpoint).To(Equal(fc.Spec.ControlPlaneEndpoint), "the Cluster's endpoint is its FakeCluster's")
		Expect(fc.OwnerReferences).To(ContainElement(HaveField("Kind", "Cluster")), "the Cluster controller owns the FakeCluster")
		// A client still on the v1beta1 API reads the Cluster through cluster-api's conversion webhook:
		// spec.infrastructureRef back to an ObjectReference with an apiVersion, and
		// status.initialization.infrastructureProvisioned to status.infrastructureReady.
		old := &clusterv1beta1.Cluster{}
		Expect(c.Get("demo", old)).To(Succeed())
		Expect(old.Spec.InfrastructureRef).To(HaveValue(And(HaveField("APIVersion", clusterapi.InfraGroupVersion.String()),
			HaveField("Kind", "FakeCluster"), HaveField("Name", "demo"))), "the v1beta1 Cluster's spec.infrastructureRef")
		Expect(old.Status.InfrastructureReady).To(BeTrue(), "the v1beta1 Cluster's status.infrastructureReady")
		m := &clusterv1.Machine{}
		Expect(c.Get("cp-0", m)).To(Succeed())
		node := &corev1.Node{}
		Expect(c.Get(m.Status.NodeRef.Name, node)).To(Succeed())
		Expect(node.Annotations).To(HaveKeyWithValue(clusterv1.MachineAnnotation, "cp-0"), "the Machine controller's annotation on its Node")
		AddReportEntry("provisioned", fmt.Sprintf("Cluster Provisioned and connected %s after create; control plane initialized %s after create",
			provisioned.Round(time.Millisecond), time.Since(c.Started).Round(time.Millisecond)), ReportEntryVisibilityAlways)
		AddReportEntry("Node field writers", fieldWriters(c, "Node", node.Name), ReportEntryVisibilityAlways)

		var admissions []string
		for _, w := range c.Writes(suite.WriteFilter{Verb: suite.VerbAdmit}) {
			if w.Admission != nil && len(w.Admission.Patch) > 0 {
				admissions = append(admissions, w.String())
			}
		}
		Expect(admissions).NotTo(BeEmpty(), "a cluster-api defaulting webhook's mutation")
		AddReportEntry("admission mutations", strings.Join(admissions, "\n"), ReportEntryVisibilityAlways)
		finish(c)
	})

	It("a MachineDeployment scales 1 -> 3 -> 1", func() {
		c := s.NewCase(GinkgoT())
		c.Invariant("scaling makes no new MachineSet", oneMachineSetEach)
		withWorkers(c, "scale", 1)
		times := []string{"1 replica " + time.Since(c.Started).Round(time.Millisecond).String() + " after create"}
		for _, n := range []int32{3, 1} {
			By(fmt.Sprintf("scaling to %d", n))
			start := time.Now()
			scale(c, "workers", n)
			expectRolledOut(c, "workers", n)
			times = append(times, fmt.Sprintf("%d replicas in %s", n, time.Since(start).Round(time.Millisecond)))
		}
		c.RequireInvariants()
		sets := &clusterv1.MachineSetList{}
		Expect(c.List(sets)).To(Succeed())
		Expect(sets.Items).To(HaveLen(1), "scaling makes no new MachineSet")
		// The MachineSet makes a Machine (named after it) per replica it was ever asked for: 1, then 2 more. A
		// MachineSet controller that misses its own create in its cache makes another and deletes it later.
		var made []string
		for _, ch := range c.Changes(suite.ChangeFilter{Kind: "Machine", Type: suite.Added}) {
			if strings.HasPrefix(ch.Name, sets.Items[0].Name+"-") {
				made = append(made, ch.Name)
			}
		}
		Expect(made).To(HaveLen(3), "scaling 1 -> 3 -> 1 makes 3 Machines of MachineSet %s", sets.Items[0].Name)
		deleted := c.Changes(suite.ChangeFilter{Kind: "Node", Type: suite.Deleted})
		Expect(deleted).To(HaveLen(2), "the Nodes of the two Machines scaled away")
		for _, ch := range deleted {
			AddReportEntry("deleted Node "+ch.Name+": deletes by", writers(c, suite.WriteFilter{Kind: "Node", Name: ch.Name, Verb: suite.VerbDelete, IncludeRejected: true}), ReportEntryVisibilityAlways)
		}
		AddReportEntry("scaling", strings.Join(times, "; "), ReportEntryVisibilityAlways)
		finish(c)
	})

	It("a template change rolls the Machines onto a new MachineSet", func() {
		c := s.NewCase(GinkgoT())
		_, before := withWorkers(c, "roll", 2)
		oldNames := map[string]bool{}
		for _, m := range before {
			oldNames[m.Name] = true
		}

		By("pointing the MachineDeployment at a new FakeMachineTemplate")
		start := time.Now()
		createTemplate(c, "large")
		md := &clusterv1.MachineDeployment{}
		Expect(c.Update("workers", md, func() { md.Spec.Template.Spec.InfrastructureRef.Name = "large" })).To(Succeed())
		var after []clusterv1.Machine
		eventually(func(g Gomega) {
			after = expectRolledOut(c, "workers", 2)
			for _, m := range after {
				g.Expect(oldNames).NotTo(HaveKey(m.Name), "Machine %s is an old one", m.Name)
				fm := &clusterapi.FakeMachine{}
				g.Expect(c.Get(m.Spec.InfrastructureRef.Name, fm)).To(Succeed())
				g.Expect(fm.Annotations).To(HaveKeyWithValue(clusterv1.TemplateClonedFromNameAnnotation, "large"))
			}
		}).Should(Succeed())
		rolled := time.Since(start)
		sets := &clusterv1.MachineSetList{}
		Expect(c.List(sets)).To(Succeed())
		var shape []string
		for _, ms := range sets.Items {
			shape = append(shape, fmt.Sprintf("%s (%s): %d", ms.Name, ms.Spec.Template.Spec.InfrastructureRef.Name, ptr.Deref(ms.Spec.Replicas, -1)))
		}
		sort.Strings(shape)
		// The rolled-out MachineSet is the one cloned from the new template; an old one, if cluster-api keeps
		// it, is scaled to 0.
		var current int
		for _, ms := range sets.Items {
			if ms.Spec.Template.Spec.InfrastructureRef.Name == "large" {
				current++
				Expect(ms.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)), "the new MachineSet %s runs both Machines", ms.Name)
			} else {
				Expect(ms.Spec.Replicas).To(HaveValue(BeZero()), "old MachineSet %s is not scaled to 0", ms.Name)
			}
		}
		Expect(current).To(Equal(1), "one MachineSet from the new template: %v", shape)
		AddReportEntry("rollout", fmt.Sprintf("2 Machines replaced in %s; MachineSets now: %s", rolled.Round(time.Millisecond),
			strings.Join(shape, ", ")), ReportEntryVisibilityAlways)
		finish(c)
	})

	It("pausing a Cluster stops its MachineDeployment scaling, and resuming lets it scale", func() {
		c := s.NewCase(GinkgoT())
		withWorkers(c, "paused", 1)

		By("pausing the Cluster")
		setPaused(c, "paused", true)
		eventually(func(g Gomega) {
			cl, md := &clusterv1.Cluster{}, &clusterv1.MachineDeployment{}
			g.Expect(c.Get("paused", cl)).To(Succeed())
			g.Expect(c.Get("workers", md)).To(Succeed())
			g.Expect(conditions.IsTrue(cl, clusterv1.PausedCondition)).To(BeTrue(), "the Cluster's Paused condition")
			g.Expect(conditions.IsTrue(md, clusterv1.PausedCondition)).To(BeTrue(), "the MachineDeployment's Paused condition")
		}).Should(Succeed())
		scale(c, "workers", 2)
		c.RequireQuiescent(time.Second, 30*time.Second)
		sets := &clusterv1.MachineSetList{}
		Expect(c.List(sets)).To(Succeed())
		Expect(sets.Items).To(HaveLen(1))
		Expect(sets.Items[0].Spec.Replicas).To(HaveValue(BeEquivalentTo(1)), "a paused Cluster's MachineSet is not scaled")
		Expect(count(c, &clusterv1.MachineList{}, client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "workers"})).To(Equal(1))

		By("resuming the Cluster")
		start := time.Now()
		setPaused(c, "paused", false)
		expectRolledOut(c, "workers", 2)
		AddReportEntry("resume", fmt.Sprintf("scaled to 2 %s after resuming", time.Since(start).Round(time.Millisecond)), ReportEntryVisibilityAlways)
		finish(c)
	})

	It("deleting the Cluster removes everything it owns", func() {
		c := s.NewCase(GinkgoT())
		cl, _ := withWorkers(c, "doomed", 2)
		mhc := &clusterv1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "workers"}, Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: "doomed", Selector: metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: "workers"}}}}
		Expect(c.Create(mhc)).To(Succeed())
		eventually(func(g Gomega) {
			g.Expect(c.Get(mhc.Name, mhc)).To(Succeed())
			g.Expect(mhc.Status.ExpectedMachines).To(HaveValue(BeEquivalentTo(2)))
			g.Expect(mhc.Status.CurrentHealthy).To(HaveValue(BeEquivalentTo(2)))
		}).Should(Succeed())
		kubeconfigSecret := cl.Name + "-kubeconfig"

		deleted := time.Now()
		Expect(c.Delete(cl)).To(Succeed())
		eventually(func(g Gomega) {
			g.Expect(apierrors.IsNotFound(c.Get(cl.Name, &clusterv1.Cluster{}))).To(BeTrue(), "Cluster still there")
			for _, l := range []client.ObjectList{&clusterv1.MachineDeploymentList{}, &clusterv1.MachineSetList{},
				&clusterv1.MachineList{}, &clusterv1.MachineHealthCheckList{}, &clusterapi.FakeClusterList{},
				&clusterapi.FakeMachineList{}, &clusterapi.FakeMachineTemplateList{}, &corev1.NodeList{}} {
				g.Expect(c.List(l)).To(Succeed())
				g.Expect(meta.LenList(l)).To(BeZero(), "%T left", l)
			}
			g.Expect(apierrors.IsNotFound(c.Get(kubeconfigSecret, &corev1.Secret{}))).To(BeTrue(), "the kubeconfig Secret is left")
		}).Should(Succeed())
		var gone []string
		for _, ch := range c.Changes(suite.ChangeFilter{Type: suite.Deleted, Since: deleted}) {
			gone = append(gone, ch.Kind+"/"+ch.Name)
		}
		sort.Strings(gone)
		AddReportEntry("cascade", fmt.Sprintf("gone in %s: %s", time.Since(deleted).Round(time.Millisecond), strings.Join(gone, ", ")),
			ReportEntryVisibilityAlways)
		for _, k := range []string{"Secret/" + kubeconfigSecret, "FakeMachineTemplate/small", "MachineHealthCheck/workers"} {
			kind, name, _ := strings.Cut(k, "/")
			AddReportEntry(k+": deletes by", writers(c, suite.WriteFilter{Kind: kind, Name: name, Verb: suite.VerbDelete, IncludeRejected: true}), ReportEntryVisibilityAlways)
			AddReportEntry(k+": field writers", fieldWriters(c, kind, name), ReportEntryVisibilityAlways)
		}
		finish(c)
	})

	It("a fresh instance of the capi manager provisions the Cluster the stopped one began", func() {
		c := s.NewCase(GinkgoT())
		// A restart point starts the fresh instance from the ManagerOptions Boot got, as each run of an explore
		// batch does (ENSEMBLE_PERTURB='|'): its client must read through its own cache. Before ensemble gave
		// each instance its own copy of the client options, it read through the stopped instance's, and the
		// second run of any spec never got its Cluster Provisioned.
		restart := perturb.Point{Mode: perturb.Restart, Writer: clusterapi.ManagerName + "/cluster", Trigger: perturb.Nth(1)}
		c.Perturb(restart)
		provisionCluster(c, "restarted")
		finish(c)
	})
})

// count lists list's kind in the case's namespace and returns how many objects it holds.
func count(c *suite.Case, list client.ObjectList, opts ...client.ListOption) int {
	GinkgoHelper()
	Expect(c.List(list, opts...)).To(Succeed())
	return meta.LenList(list)
}

// writers returns the distinct writers ("manager/controller") of the case's writes that match f, sorted and
// joined.
func writers(c *suite.Case, f suite.WriteFilter) string {
	set := map[string]bool{}
	for _, w := range c.Writes(f) {
		set[w.Manager+"/"+w.Controller] = true
	}
	out := make([]string, 0, len(set))
	for w := range set {
		out = append(out, w)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
