package kuberay_test

import (
	"fmt"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	"github.com/ensembletest/ensemble/fakes/dataplane"
	"github.com/ensembletest/ensemble/suite"
)

// rayImage is the image of every Ray container; the data-plane kubelet runs nothing, so any tag does.
const rayImage = "rayproject/ray:2.46.0"

// kubeRayControllers are the controllers Setup registers, as controller-runtime's builder names them.
var kubeRayControllers = []string{"raycluster", "rayjob", "rayservice"}

// clusterSpec is a Ray cluster of a head and workers worker pods (one worker group).
func clusterSpec(workers int32) rayv1.RayClusterSpec {
	pod := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: rayImage}}}}
	}
	return rayv1.RayClusterSpec{
		HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{}, Template: pod("ray-head")},
		WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{
			GroupName: "workers", Replicas: ptr.To(workers), MinReplicas: ptr.To(workers), MaxReplicas: ptr.To(workers),
			RayStartParams: map[string]string{}, Template: pod("ray-worker"),
		}},
	}
}

// rayJob is a RayJob in the default K8sJobMode with its own cluster of a head and one worker, kept after
// the job finishes.
func rayJob(name string) *rayv1.RayJob {
	return &rayv1.RayJob{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: rayv1.RayJobSpec{
		Entrypoint:               `python -c "print('hello')"`,
		RayClusterSpec:           ptr.To(clusterSpec(1)),
		ShutdownAfterJobFinishes: false,
	}}
}

// eventually polls fn for up to 30 s.
func eventually(fn func(g Gomega)) AsyncAssertion {
	return Eventually(fn).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond)
}

// expectClusterReady waits for RayCluster name to reach status.state ready.
func expectClusterReady(c *suite.Case, name string) {
	GinkgoHelper()
	eventually(func(g Gomega) {
		rc := &rayv1.RayCluster{}
		g.Expect(c.Get(name, rc)).To(Succeed())
		g.Expect(rc.Status.State).To(Equal(rayv1.Ready))
	}).Should(Succeed())
}

// startRayJob creates RayJob name and waits for its RayCluster to be ready and its submitter Job to exist;
// it returns the RayCluster's name.
func startRayJob(c *suite.Case, name string) string {
	GinkgoHelper()
	Expect(c.Create(rayJob(name))).To(Succeed())
	var cluster string
	eventually(func(g Gomega) {
		job := &rayv1.RayJob{}
		g.Expect(c.Get(name, job)).To(Succeed())
		g.Expect(job.Status.RayClusterName).NotTo(BeEmpty())
		cluster = job.Status.RayClusterName
	}).Should(Succeed())
	expectClusterReady(c, cluster)
	eventually(func(g Gomega) {
		g.Expect(c.Get(name, &batchv1.Job{})).To(Succeed())
	}).Should(Succeed(), "the submitter Job of RayJob %s", name)
	return cluster
}

// passCounts renders the passes per controller of manager in the case's namespace.
func passCounts(c *suite.Case, manager string, controllers ...string) string {
	var parts []string
	for _, ctl := range controllers {
		parts = append(parts, fmt.Sprintf("%s=%d", ctl, len(c.Passes(suite.PassFilter{Manager: manager, Controller: ctl}))))
	}
	return strings.Join(parts, " ")
}

// count lists list's kind in the case's namespace and returns how many objects it holds.
func count(c *suite.Case, list client.ObjectList) int {
	GinkgoHelper()
	Expect(c.List(list)).To(Succeed())
	return meta.LenList(list)
}

var _ = Describe("kuberay", func() {
	It("a RayCluster of a head and 2 workers becomes ready and its namespace is quiescent for 1 s", func() {
		c := s.NewCase(GinkgoT())
		rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo"}, Spec: clusterSpec(2)}
		Expect(c.Create(rc)).To(Succeed())
		expectClusterReady(c, rc.Name)
		ready := time.Since(c.Started)
		Expect(count(c, &corev1.PodList{})).To(Equal(3))
		took := c.RequireQuiescent(time.Second, 20*time.Second)
		AddReportEntry("ready, then quiescent for 1 s", fmt.Sprintf("ready after %s, quiet window complete %s later",
			ready.Round(time.Millisecond), took.Round(time.Millisecond)), ReportEntryVisibilityAlways)

		passes := c.Passes(suite.PassFilter{Manager: "kuberay", Controller: "raycluster", Name: rc.Name})
		timeline := suite.OperatorTimeline(passes)
		AddReportEntry("passes per KubeRay controller", passCounts(c, "kuberay", kubeRayControllers...)+
			"; dataplane: "+passCounts(c, dataplane.ManagerName, dataplane.KubeletControllerName),
			ReportEntryVisibilityAlways)
		var compressed []suite.Pass
		for _, p := range passes {
			if p.Asked == 300*time.Second && p.RequeueAfter == 50*time.Millisecond {
				compressed = append(compressed, p)
			}
		}
		Expect(compressed).NotTo(BeEmpty(), "a raycluster pass that asked for its 300 s requeue, handed 50 ms")
		first, last := passes[0], passes[len(passes)-1]
		AddReportEntry("raycluster requeue compression", fmt.Sprintf(
			"%d of %d passes asked RequeueAfter %s and were handed %s; %d passes in %s of wall time are %s of operator time",
			len(compressed), len(passes), compressed[0].Asked, compressed[0].RequeueAfter, len(passes),
			last.Start.Sub(first.Start).Round(time.Millisecond), timeline[len(timeline)-1].Round(time.Second)), ReportEntryVisibilityAlways)
	})

	It("a RayJob's RayCluster: the rayjob controller creates it, the raycluster controller writes its status", func() {
		c := s.NewCase(GinkgoT())
		cluster := startRayJob(c, "hello")

		creates := c.Writes(suite.WriteFilter{Kind: "RayCluster", Name: cluster, Verb: suite.VerbCreate})
		Expect(creates).To(HaveLen(1))
		Expect(creates[0].Err).NotTo(HaveOccurred())
		Expect(creates[0].Manager + "/" + creates[0].Controller).To(Equal("kuberay/rayjob"))

		writers := c.FieldWriters("RayCluster", cluster)
		var lines []string
		for path, who := range writers {
			lines = append(lines, path+": "+strings.Join(who, ", "))
		}
		sort.Strings(lines)
		AddReportEntry("RayCluster field writers (created by kuberay/rayjob)", strings.Join(lines, "\n"), ReportEntryVisibilityAlways)
		statusFields := 0
		for path, who := range writers {
			switch {
			case strings.HasPrefix(path, "status."):
				statusFields++
				Expect(who).To(Equal([]string{"kuberay/raycluster"}), "writers of %s", path)
			case strings.HasPrefix(path, "spec."):
				Expect(who).To(Equal([]string{"kuberay/rayjob"}), "writers of %s", path)
			}
		}
		Expect(statusFields).To(BeNumerically(">", 0), "status fields the raycluster controller wrote")

		rc, job := &rayv1.RayCluster{}, &rayv1.RayJob{}
		Expect(c.Get(cluster, rc)).To(Succeed())
		Expect(c.Get("hello", job)).To(Succeed())
		Expect(metav1.IsControlledBy(rc, job)).To(BeTrue(), "RayCluster %s is controlled by RayJob hello", cluster)
		Expect(rc.Spec.WorkerGroupSpecs).To(HaveLen(1))
		Expect(rc.Spec.WorkerGroupSpecs[0].Replicas).To(HaveValue(BeEquivalentTo(1)))
		Expect(rc).To(suite.HaveSingleFieldOwners())
		owners, err := suite.OwnershipOf(rc)
		Expect(err).NotTo(HaveOccurred())
		var managers []string
		for m, paths := range owners {
			managers = append(managers, fmt.Sprintf("%s (%d fields)", m, len(paths)))
		}
		sort.Strings(managers)
		AddReportEntry("RayCluster field managers (managedFields)", strings.Join(managers, ", "), ReportEntryVisibilityAlways)
		failed := 0
		for _, p := range c.Passes(suite.PassFilter{Manager: "kuberay", Controller: "rayjob"}) {
			if p.Err != nil {
				failed++
			}
		}
		AddReportEntry("passes per KubeRay controller", fmt.Sprintf("%s (rayjob passes ended in an error: %d; the Ray dashboard is unreachable)",
			passCounts(c, "kuberay", kubeRayControllers...), failed), ReportEntryVisibilityAlways)
	})

	It("deleting a RayJob removes its RayCluster, pods and services and releases every finalizer", func() {
		c := s.NewCase(GinkgoT())
		cluster := startRayJob(c, "doomed")
		job := &rayv1.RayJob{}
		Expect(c.Get("doomed", job)).To(Succeed())
		Expect(job.Finalizers).To(ContainElement("ray.io/rayjob-finalizer"))
		rayPods := &corev1.PodList{} // the cluster's head and worker; the submitter Job's pod comes and goes
		Expect(c.List(rayPods, client.MatchingLabels{"ray.io/cluster": cluster})).To(Succeed())
		Expect(rayPods.Items).To(HaveLen(2))
		Expect(count(c, &corev1.ServiceList{})).To(BeNumerically(">", 0))

		deleted := time.Now()
		Expect(c.Delete(job)).To(Succeed())
		eventually(func(g Gomega) {
			err := c.Get("doomed", &rayv1.RayJob{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "RayJob doomed still there: %v", err)
			for _, l := range []client.ObjectList{&rayv1.RayClusterList{}, &corev1.PodList{}, &corev1.ServiceList{}, &batchv1.JobList{}} {
				g.Expect(c.List(l)).To(Succeed())
				g.Expect(meta.LenList(l)).To(BeZero(), "%T left in the namespace", l)
			}
		}).Should(Succeed())

		unfinalize := c.Writes(suite.WriteFilter{Kind: "RayJob", Name: "doomed", Manager: "kuberay", Controller: "rayjob",
			Verb: suite.VerbUpdate, Since: deleted})
		Expect(unfinalize).NotTo(BeEmpty(), "the rayjob controller's update that removed its finalizer")
		// kube-controller-manager's garbage collector deletes the dependents; its writes are not recorded (it is
		// not a manager of the suite), so the deletions are read from the event stream.
		var gone []string
		for _, ch := range c.Changes(suite.ChangeFilter{Type: suite.Deleted, Since: deleted}) {
			gone = append(gone, ch.Kind+"/"+ch.Name)
		}
		sort.Strings(gone)
		Expect(gone).To(ContainElement("RayCluster/" + cluster))
		AddReportEntry("cascade after deleting RayJob doomed", fmt.Sprintf(
			"gone in %s; finalizer removed by kuberay/rayjob; deleted: %s",
			time.Since(deleted).Round(time.Millisecond), strings.Join(gone, ", ")), ReportEntryVisibilityAlways)
	})
})
