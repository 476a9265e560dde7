package kueue_test

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/constants"
	workloadjob "sigs.k8s.io/kueue/pkg/controller/jobs/job"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	"github.com/ensembletest/ensemble/fakes/dataplane"
	"github.com/ensembletest/ensemble/suite"
)

// schedulerName is the name Kueue's scheduler, a manager Runnable and no controller, writes under:
// ensemble names a Runnable by its type.
const schedulerName = "scheduler.Scheduler"

// eventually polls fn for up to 30 s.
func eventually(fn func(g Gomega)) AsyncAssertion {
	return Eventually(fn).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond)
}

// setupQueues creates what a batch administrator sets up for the case's namespace: a ResourceFlavor, a
// ClusterQueue with 1 CPU of nominal quota in it (preempting as preemption says, when not nil) and the
// namespace's LocalQueue "default" pointing at it, the queue Kueue's webhook gives a Job with no queue
// label. It waits until both queues are Active and returns the ClusterQueue's name. Cluster-scoped names
// carry the namespace, so no two specs share one.
func setupQueues(c *suite.Case, preemption *kueueapi.ClusterQueuePreemption) string {
	GinkgoHelper()
	flavor, cq := c.Namespace+"-flavor", c.Namespace+"-cq"
	Expect(c.Create(utiltesting.MakeResourceFlavor(flavor).Obj())).To(Succeed())
	w := utiltesting.MakeClusterQueue(cq).ResourceGroup(*utiltesting.MakeFlavorQuotas(flavor).Resource(corev1.ResourceCPU, "1").Obj())
	if preemption != nil {
		w = w.Preemption(*preemption)
	}
	Expect(c.Create(w.Obj())).To(Succeed())
	Expect(c.Create(utiltesting.MakeLocalQueue(string(constants.DefaultLocalQueueName), c.Namespace).ClusterQueue(cq).Obj())).To(Succeed())
	eventually(func(g Gomega) {
		q, lq := &kueueapi.ClusterQueue{}, &kueueapi.LocalQueue{}
		g.Expect(c.Get(cq, q)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(q.Status.Conditions, kueueapi.ClusterQueueActive)).To(BeTrue(), "ClusterQueue conditions %v", q.Status.Conditions)
		g.Expect(c.Get(string(constants.DefaultLocalQueueName), lq)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(lq.Status.Conditions, kueueapi.LocalQueueActive)).To(BeTrue(), "LocalQueue conditions %v", lq.Status.Conditions)
	}).Should(Succeed())
	return cq
}

// userJob is a Job as a Kueue user writes it: not suspended and with no queue label (Kueue's webhook
// suspends it and gives it the namespace's default LocalQueue), one pod asking for 1 CPU that the kubelet
// fake runs for runFor (a Go duration) and completes.
func userJob(c *suite.Case, name, runFor string) *testingjob.JobWrapper {
	return testingjob.MakeJob(name, c.Namespace).Suspend(false).Request(corev1.ResourceCPU, "1").
		PodAnnotation(dataplane.AnnotationRunFor, runFor)
}

// workloadOf returns the name of the Workload Kueue's job controller makes for the case's Job name.
func workloadOf(c *suite.Case, name string) string {
	GinkgoHelper()
	j := &batchv1.Job{}
	Expect(c.Get(name, j)).To(Succeed())
	return workloadjob.GetWorkloadNameForJob(j.Name, j.UID)
}

// conditionTrue reports whether the case's Workload name has condition typ True, and its reason.
func conditionTrue(g Gomega, c *suite.Case, name, typ string) string {
	wl := &kueueapi.Workload{}
	g.Expect(c.Get(name, wl)).To(Succeed())
	cond := apimeta.FindStatusCondition(wl.Status.Conditions, typ)
	g.Expect(cond).NotTo(BeNil(), "Workload %s has no %s condition: %v", name, typ, wl.Status.Conditions)
	g.Expect(cond.Status).To(BeEquivalentTo("True"), "Workload %s condition %s: %s", name, typ, cond.Message)
	return cond.Reason
}

// expectRunning waits until the Workload of Job name is admitted, the Job unsuspended and its pod running.
func expectRunning(c *suite.Case, name string) string {
	GinkgoHelper()
	wl := workloadOf(c, name)
	eventually(func(g Gomega) {
		conditionTrue(g, c, wl, kueueapi.WorkloadAdmitted)
		j := &batchv1.Job{}
		g.Expect(c.Get(name, j)).To(Succeed())
		g.Expect(j.Spec.Suspend).To(HaveValue(BeFalse()), "Job %s suspended", name)
		g.Expect(j.Status.Active).To(BeEquivalentTo(1), "Job %s active pods", name)
		pods := &corev1.PodList{}
		g.Expect(c.List(pods, client.MatchingLabels{batchv1.JobNameLabel: name})).To(Succeed())
		g.Expect(pods.Items).To(ContainElement(HaveField("Status.Phase", corev1.PodRunning)), "a running pod of Job %s", name)
	}).Should(Succeed())
	return wl
}

// expectComplete waits until Job name is Complete and its Workload Finished.
func expectComplete(c *suite.Case, name string) {
	GinkgoHelper()
	wl := workloadOf(c, name)
	eventually(func(g Gomega) {
		j := &batchv1.Job{}
		g.Expect(c.Get(name, j)).To(Succeed())
		g.Expect(j.Status.Conditions).To(ContainElement(And(HaveField("Type", batchv1.JobComplete), HaveField("Status", corev1.ConditionTrue))),
			"Job %s conditions", name)
		conditionTrue(g, c, wl, kueueapi.WorkloadFinished)
	}).Should(Succeed())
}

// firstChange returns the resourceVersion of the first change of kind/name of type typ ("" for any) in
// which match holds for a field (nil: for any change); 0 if none.
func firstChange(c *suite.Case, kind, name string, typ suite.ChangeType, match func(suite.FieldChange) bool) int64 {
	for _, ch := range c.Changes(suite.ChangeFilter{Kind: kind, Name: name, Type: typ}) {
		if match == nil || slices.ContainsFunc(ch.Fields, match) {
			n, _ := strconv.ParseInt(ch.ResourceVersion, 10, 64)
			return n
		}
	}
	return 0
}

// changedTo returns the resourceVersion of the first change of kind/name whose field path became value; 0 if none.
func changedTo(c *suite.Case, kind, name, path, value string) int64 {
	return firstChange(c, kind, name, "", func(f suite.FieldChange) bool { return f.Path == path && f.New == value })
}

// reportActivity adds a report entry with the case's reconcile passes per controller (gated ones apart)
// and its writes per writer, Runnables such as Kueue's scheduler included, and checks that the scheduler
// wrote and that the clusterqueue controller reconciled the case's ClusterQueue cq under the gate.
func reportActivity(c *suite.Case, cq string) {
	GinkgoHelper()
	passes, gated := map[string]int{}, map[string]int{}
	for _, p := range c.Passes(suite.PassFilter{}) {
		if p.Gated {
			gated[p.Manager+"/"+p.Controller]++
		} else {
			passes[p.Manager+"/"+p.Controller]++
		}
	}
	writes := map[string]int{}
	for _, w := range c.Writes(suite.WriteFilter{IncludeRejected: true}) {
		switch {
		case w.Kind == "Event":
			writes[w.Manager+" events"]++ // an event recorder's, sent from its own goroutine, in no pass
		case w.Controller == "":
			writes[w.Manager+" (no pass)"]++
		default:
			writes[w.Manager+"/"+w.Controller]++
		}
	}
	line := func(m map[string]int) string {
		var parts []string
		for k, n := range m {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(parts)
		return strings.Join(parts, " ")
	}
	AddReportEntry("passes per controller", line(passes)+"; gated: "+line(gated), ReportEntryVisibilityAlways)
	AddReportEntry("writes per writer", line(writes), ReportEntryVisibilityAlways)
	Expect(writes).To(HaveKey("kueue/"+schedulerName), "Kueue's scheduler wrote under its own name")
	cqPasses := c.Passes(suite.PassFilter{Manager: "kueue", Controller: "clusterqueue_controller", Name: cq})
	Expect(cqPasses).To(ContainElement(HaveField("Gated", false)), "the clusterqueue controller reconciled ClusterQueue %s under the gate", cq)
}

var _ = Describe("kueue", func() {
	It("a Job is admitted within its ClusterQueue's quota, unsuspended, run and completed", func() {
		c := s.NewCase(GinkgoT())
		cq := setupQueues(c, nil)
		j := userJob(c, "sample", "200ms").Obj()
		Expect(c.Create(j)).To(Succeed())
		Expect(j.Spec.Suspend).To(HaveValue(BeTrue()), "Kueue's job webhook suspends a new Job")
		Expect(j.Labels).To(HaveKeyWithValue(constants.QueueLabel, string(constants.DefaultLocalQueueName)), "Kueue's job webhook defaults the queue")
		admissions := c.Writes(suite.WriteFilter{Kind: "Job", Name: j.Name, Verb: suite.VerbAdmit})
		Expect(admissions).To(ContainElement(HaveField("Controller", "mjob.kb.io")), "the mutating job webhook admitted the create")

		wl := expectRunning(c, j.Name)
		expectComplete(c, j.Name)
		done := time.Since(c.Started)
		workload := &kueueapi.Workload{}
		Expect(c.Get(wl, workload)).To(Succeed())
		Expect(workload.Status.Admission).NotTo(BeNil())
		Expect(workload.Status.Admission.ClusterQueue).To(BeEquivalentTo(cq))
		Expect(workload.Status.Admission.PodSetAssignments).To(HaveLen(1))
		Expect(workload.Status.Admission.PodSetAssignments[0].Flavors).To(HaveKeyWithValue(corev1.ResourceCPU, BeEquivalentTo(c.Namespace+"-flavor")))
		pods := &corev1.PodList{}
		Expect(c.List(pods, client.MatchingLabels{batchv1.JobNameLabel: j.Name})).To(Succeed())
		Expect(pods.Items).To(ConsistOf(HaveField("Status.Phase", corev1.PodSucceeded)), "the kubelet ran the Job's one pod to completion")

		admittedBy := c.FieldWriters("Workload", wl)["status.admission.clusterQueue"]
		Expect(admittedBy).To(Equal([]string{"kueue/" + schedulerName}), "the scheduler admits the Workload")
		Expect(c.Writes(suite.WriteFilter{Kind: "Job", Subresource: "status", IncludeRejected: true})).To(HaveEach(And(
			HaveField("Manager", suite.KubeControllerManager), HaveField("Controller", "job-controller"))), "only kube-controller-manager's Job controller writes the Job's status")
		Expect(changedTo(c, "Job", j.Name, "spec.suspend", "false")).To(BeNumerically(">", changedTo(c, "Workload", wl, "status.conditions[type=Admitted].status", "True")),
			"the Job is unsuspended after its Workload is admitted")
		took := c.RequireQuiescent(time.Second, 20*time.Second)
		AddReportEntry("Job done", fmt.Sprintf("Complete and its Workload Finished %s after the case began; quiet 1 s window complete %s later; Job spec.suspend written by %v",
			done.Round(time.Millisecond), took.Round(time.Millisecond), c.FieldWriters("Job", j.Name)["spec.suspend"]), ReportEntryVisibilityAlways)
		reportActivity(c, cq)
	})

	It("a second Job waits, suspended, until the first one finishes and frees the quota", func() {
		c := s.NewCase(GinkgoT())
		cq := setupQueues(c, nil)
		Expect(c.Create(userJob(c, "first", "2s").Obj())).To(Succeed())
		first := expectRunning(c, "first")
		Expect(c.Create(userJob(c, "second", "200ms").Obj())).To(Succeed())
		second := workloadOf(c, "second")
		eventually(func(g Gomega) {
			wl := &kueueapi.Workload{}
			g.Expect(c.Get(second, wl)).To(Succeed())
			cond := apimeta.FindStatusCondition(wl.Status.Conditions, kueueapi.WorkloadQuotaReserved)
			g.Expect(cond).NotTo(BeNil(), "Workload %s conditions %v", second, wl.Status.Conditions)
			g.Expect(cond.Status).To(BeEquivalentTo("False"))
			g.Expect(cond.Reason).To(Equal("Pending"))
			g.Expect(cond.Message).To(ContainSubstring("insufficient unused quota"))
		}).Should(Succeed(), "the second Workload is pending for lack of quota")

		expectComplete(c, "first")
		expectComplete(c, "second")
		firstFinished := changedTo(c, "Workload", first, "status.conditions[type=Finished].status", "True")
		secondReserved := changedTo(c, "Workload", second, "status.conditions[type=QuotaReserved].status", "True")
		secondResumed := changedTo(c, "Job", "second", "spec.suspend", "false")
		Expect(firstFinished).NotTo(BeZero())
		Expect(secondReserved).To(BeNumerically(">", firstFinished), "the second Workload got quota only after the first finished")
		Expect(secondResumed).To(BeNumerically(">", secondReserved), "the second Job stayed suspended until its Workload was admitted")
		c.RequireQuiescent(time.Second, 20*time.Second)
		AddReportEntry("order (resourceVersions)", fmt.Sprintf("first Workload Finished %d < second Workload QuotaReserved %d < second Job unsuspended %d",
			firstFinished, secondReserved, secondResumed), ReportEntryVisibilityAlways)
		reportActivity(c, cq)
	})

	It("a higher-priority Job preempts a running lower-priority one, which resumes once it finishes", func() {
		c := s.NewCase(GinkgoT())
		low, high := c.Namespace+"-low", c.Namespace+"-high"
		Expect(c.Create(utiltesting.MakeWorkloadPriorityClass(low).PriorityValue(100).Obj())).To(Succeed())
		Expect(c.Create(utiltesting.MakeWorkloadPriorityClass(high).PriorityValue(1000).Obj())).To(Succeed())
		cq := setupQueues(c, &kueueapi.ClusterQueuePreemption{WithinClusterQueue: kueueapi.PreemptionPolicyLowerPriority})
		Expect(c.Create(userJob(c, "batch", "1h").WorkloadPriorityClass(low).Obj())).To(Succeed())
		lowWL := expectRunning(c, "batch")
		preempting := time.Now()
		Expect(c.Create(userJob(c, "urgent", "200ms").WorkloadPriorityClass(high).Obj())).To(Succeed())
		highWL := workloadOf(c, "urgent")
		expectComplete(c, "urgent")
		preempted := time.Since(preempting)
		expectRunning(c, "batch") // admitted again once the urgent Job released the quota

		evicted := changedTo(c, "Workload", lowWL, "status.conditions[type=Evicted].reason", kueueapi.WorkloadEvictedByPreemption)
		Expect(evicted).NotTo(BeZero(), "the low-priority Workload was evicted by preemption")
		Expect(changedTo(c, "Workload", lowWL, "status.conditions[type=Preempted].reason", kueueapi.InClusterQueueReason)).NotTo(BeZero(),
			"the low-priority Workload was preempted within its ClusterQueue")
		resuspended := firstChange(c, "Job", "batch", "", func(f suite.FieldChange) bool {
			return f.Path == "spec.suspend" && f.Old == "false" && f.New == "true"
		})
		Expect(resuspended).To(BeNumerically(">", evicted), "the preempted Job was suspended again after its Workload's eviction")
		highReserved := changedTo(c, "Workload", highWL, "status.conditions[type=QuotaReserved].status", "True")
		Expect(highReserved).To(BeNumerically(">", evicted), "the high-priority Workload got the quota after the eviction")
		Expect(c.FieldWriters("Workload", lowWL)["status.conditions[type=Preempted].reason"]).To(ContainElement("kueue/"+schedulerName),
			"the scheduler's preemptor preempted it")
		batch := &batchv1.Job{}
		Expect(c.Get("batch", batch)).To(Succeed())
		Expect(batch.Status.Conditions).NotTo(ContainElement(HaveField("Type", batchv1.JobComplete)), "the preempted Job did not complete")
		c.RequireQuiescent(time.Second, 20*time.Second)
		AddReportEntry("preemption", fmt.Sprintf("urgent Job created, batch evicted (rv %d), batch suspended (rv %d), urgent admitted (rv %d) and completed in %s; batch running again",
			evicted, resuspended, highReserved, preempted.Round(time.Millisecond)), ReportEntryVisibilityAlways)
		reportActivity(c, cq)
	})

	It("a deleted ClusterQueue stays, admitting nothing new, until its admitted Job finishes, then goes", func() {
		c := s.NewCase(GinkgoT())
		cq := setupQueues(c, nil)
		Expect(c.Create(userJob(c, "first", "2s").Obj())).To(Succeed())
		first := expectRunning(c, "first")
		queue := &kueueapi.ClusterQueue{}
		Expect(c.Get(cq, queue)).To(Succeed())
		Expect(queue.Finalizers).To(ContainElement(kueueapi.ResourceInUseFinalizerName))
		deleted := time.Now()
		Expect(c.Delete(queue)).To(Succeed())
		Expect(c.Create(userJob(c, "second", "200ms").Obj())).To(Succeed())
		second := workloadOf(c, "second")

		expectComplete(c, "first")
		eventually(func(g Gomega) {
			err := c.Get(cq, &kueueapi.ClusterQueue{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ClusterQueue %s still there: %v", cq, err)
			lq := &kueueapi.LocalQueue{}
			g.Expect(c.Get(string(constants.DefaultLocalQueueName), lq)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionFalse(lq.Status.Conditions, kueueapi.LocalQueueActive)).To(BeTrue(), "LocalQueue conditions %v", lq.Status.Conditions)
		}).Should(Succeed())
		gone := time.Since(deleted)
		c.RequireQuiescent(time.Second, 20*time.Second)

		refused := changedTo(c, "Workload", second, "status.conditions[type=QuotaReserved].message", "ClusterQueue "+cq+" is inactive")
		Expect(refused).NotTo(BeZero(), "the second Workload was never refused as inactive")
		Expect(refused).To(BeNumerically("<", firstChange(c, "ClusterQueue", cq, suite.Deleted, nil)), "the second Workload was refused by the terminating ClusterQueue")
		firstFinished := changedTo(c, "Workload", first, "status.conditions[type=Finished].status", "True")
		Expect(firstFinished).NotTo(BeZero(), "the first Workload never finished")
		Expect(firstChange(c, "ClusterQueue", cq, suite.Deleted, nil)).To(BeNumerically(">", firstFinished), "the ClusterQueue went only after its admitted Workload finished")
		Expect(changedTo(c, "Workload", second, "status.conditions[type=QuotaReserved].status", "True")).To(BeZero(), "a Workload was admitted to a deleted ClusterQueue")
		j := &batchv1.Job{}
		Expect(c.Get("second", j)).To(Succeed())
		Expect(j.Spec.Suspend).To(HaveValue(BeTrue()), "the second Job stays suspended")
		Expect(c.FieldWriters("ClusterQueue", cq)).To(HaveKeyWithValue("metadata.deletionTimestamp", []string{"case/spec"}))
		released := c.Writes(suite.WriteFilter{Kind: "ClusterQueue", Name: cq, Manager: "kueue", Controller: "clusterqueue_controller", Verb: suite.VerbUpdate, Since: deleted})
		Expect(released).NotTo(BeEmpty(), "the clusterqueue controller's update that removed its %s finalizer", kueueapi.ResourceInUseFinalizerName)
		AddReportEntry("ClusterQueue deletion", fmt.Sprintf("gone %s after its deletion, after first's Workload Finished (rv %d), its finalizer released by %s; the second Job still suspended",
			gone.Round(time.Millisecond), firstFinished, released[len(released)-1]), ReportEntryVisibilityAlways)
		reportActivity(c, cq)
	})
})
