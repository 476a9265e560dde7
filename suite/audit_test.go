package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// auditLine is one audit event of a write of ConfigMap ns/name, as kube-apiserver logs it.
func auditLine(auditID, user, agent, verb, ns, name, rv string, code int) string {
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":%q,"stage":"ResponseComplete",`+
		`"requestURI":"/api/v1/namespaces/%s/configmaps/%s?fieldManager=fm","verb":%q,"user":{"username":%q},"userAgent":%q,`+
		`"objectRef":{"resource":"configmaps","namespace":%q,"name":%q,"apiVersion":"v1"},"responseStatus":{"metadata":{},"code":%d},`+
		`"responseObject":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":"u-%s","resourceVersion":%q}},`+
		`"stageTimestamp":"2026-01-02T03:04:05.123456Z"}`+"\n", auditID, ns, name, verb, user, agent, ns, name, code, name, ns, name, rv)
}

// TestAuditReaderFollowsTheLog feeds the reader a log by hand: lines written in pieces, a line of the
// harness's own (auditIDPrefix), and a rotation (the file renamed, a new one at the path). Every write is
// recorded once, the harness's is not, and each is named after its user and User-Agent.
func TestAuditReaderFollowsTheLog(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	g.Expect(os.WriteFile(path, nil, 0o600)).To(Succeed())
	s := &Suite{rec: newRecorder(newScheme(), newBroadcast(), newScopes())}
	f, err := os.Open(path)
	g.Expect(err).NotTo(HaveOccurred())
	// No poll loop: the test reads (catchUp) and follows the rotation itself.
	a := &auditReader{path: path, s: s, f: f, kinds: map[schema.GroupVersionResource]string{}}
	defer func() { _ = a.f.Close() }()

	kcm := "kube-controller-manager/v0.0.0 (linux/amd64) kubernetes/$Format/replicaset-controller"
	appendTo := func(p, text string) {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = f.WriteString(text)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(f.Close()).To(Succeed())
	}
	first := auditLine("a1", "ensemble-kube-controller-manager", kcm, "update", "ns", "one", "10", 200)
	appendTo(path, first[:40])
	a.catchUp()
	g.Expect(s.rec.writes("ns", WriteFilter{})).To(BeEmpty(), "half a line was recorded")
	appendTo(path, first[40:]+auditLine(auditIDPrefix+"7", "admin", "suite.test/v0.0.0 (linux/amd64) kubernetes/$Format", "update", "ns", "mine", "11", 200))
	a.catchUp()
	// kube-apiserver rotates: the rest of the old file, then the new one.
	appendTo(path, auditLine("a2", "tenant", "tenant-operator", "patch", "ns", "two", "12", 200))
	g.Expect(os.Rename(path, filepath.Join(dir, "audit-old.log"))).To(Succeed())
	appendTo(path, auditLine("a3", "ensemble-kube-controller-manager", kcm, "update", "ns", "three", "13", 409))
	a.followRotation()
	appendTo(path, auditLine("a4", "ensemble-kube-controller-manager", kcm, "delete", "ns", "four", "14", 200))
	a.catchUp()

	var got []string
	for _, w := range s.rec.writes("ns", WriteFilter{IncludeRejected: true}) {
		g.Expect(w.FieldOwner).To(Equal("fm"))
		got = append(got, fmt.Sprintf("%s %s %s rv=%s uid=%s err=%v", w.writer(), w.Verb, w.Name, w.ResourceVersion, w.UID, w.Err != nil))
	}
	g.Expect(got).To(Equal([]string{
		"kube-controller-manager/replicaset-controller update one rv=10 uid=u-one err=false",
		"tenant patch two rv=12 uid=u-two err=false",
		"kube-controller-manager/replicaset-controller update three rv= uid= err=true",
		"kube-controller-manager/replicaset-controller delete four rv= uid=u-four err=false",
	}))
}

// TestAuditWriter names writers from the audit event's user and User-Agent.
func TestAuditWriter(t *testing.T) {
	for _, c := range []struct{ user, agent, manager, controller string }{
		{"ensemble-kube-controller-manager", "kube-controller-manager/v0.0.0 (linux/amd64) kubernetes/$Format/generic-garbage-collector", "kube-controller-manager", "generic-garbage-collector"},
		{"ensemble-kube-controller-manager", "kube-controller-manager/v0.0.0 (linux/amd64) kubernetes/$Format", "kube-controller-manager", ""},
		{"system:serviceaccount:ns:op", "op/v1 (linux/amd64) kubernetes/abc/shard-controller", "system:serviceaccount:ns:op", "shard-controller"},
		{"tenant", "ensemble-opA/v0", "tenant", ""},
	} {
		m, ctl := auditWriter(c.user, c.agent)
		if m != c.manager || ctl != c.controller {
			t.Errorf("auditWriter(%q, %q) = %q, %q; want %q, %q", c.user, c.agent, m, ctl, c.manager, c.controller)
		}
	}
}
