package suite

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/conversion"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	webhookconversion "sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	"github.com/ensembletest/ensemble/internal/controlplane"
	"github.com/ensembletest/ensemble/internal/recordtb"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// gadgetV1 and gadgetV2 are the two served versions of testdata/webhooks/gadget-crd.yaml: v1, the storage
// version and the conversion hub, spells the field spec.colour, v2 spec.color.
type gadgetV1 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Colour string `json:"colour,omitempty"`
	} `json:"spec"`
}

type gadgetV2 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Color string `json:"color,omitempty"`
	} `json:"spec"`
}

func (g *gadgetV1) DeepCopyObject() runtime.Object {
	c := *g
	g.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

func (g *gadgetV2) DeepCopyObject() runtime.Object {
	c := *g
	g.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// Hub makes v1 the version the others convert through.
func (*gadgetV1) Hub() {}

func (g *gadgetV2) ConvertTo(h conversion.Hub) error {
	hub := h.(*gadgetV1)
	hub.ObjectMeta, hub.Spec.Colour = g.ObjectMeta, g.Spec.Color
	return nil
}

func (g *gadgetV2) ConvertFrom(h conversion.Hub) error {
	hub := h.(*gadgetV1)
	g.ObjectMeta, g.Spec.Color = hub.ObjectMeta, hub.Spec.Colour
	return nil
}

// widgetV1 and widgetV2 are the two served versions of testdata/webhooks/widget-crd.yaml, which has no
// conversion webhook: shaped as the Gadget's, they are not convertible in the scheme (a defined type has no
// Hub, ConvertTo or ConvertFrom method), and widgetConverter converts them through the manager's converter
// registry, as cluster-api does.
type (
	widgetV1 gadgetV1
	widgetV2 gadgetV2
)

func (w *widgetV1) DeepCopyObject() runtime.Object {
	c := widgetV1(*(*gadgetV1)(w).DeepCopyObject().(*gadgetV1))
	return &c
}

func (w *widgetV2) DeepCopyObject() runtime.Object {
	c := widgetV2(*(*gadgetV2)(w).DeepCopyObject().(*gadgetV2))
	return &c
}

// widgetConverter converts Widgets between v1, the hub, and v2 (ctrl.NewWebhookManagedBy(...).WithConverter).
var widgetConverter = webhookconversion.NewHubSpokeConverter(&widgetV1{}, webhookconversion.NewSpokeConverter(&widgetV2{},
	func(_ context.Context, hub *widgetV1, spoke *widgetV2) error {
		spoke.ObjectMeta, spoke.Spec.Color = hub.ObjectMeta, hub.Spec.Colour
		return nil
	},
	func(_ context.Context, spoke *widgetV2, hub *widgetV1) error {
		hub.ObjectMeta, hub.Spec.Colour = spoke.ObjectMeta, spoke.Spec.Color
		return nil
	}))

// webhookScheme is newScheme's with both Gadget and both Widget versions.
func webhookScheme() *runtime.Scheme {
	s := newScheme()
	group := "webhooktest.ensemble.dev"
	for v, objs := range map[string]map[string]runtime.Object{"v1": {"Gadget": &gadgetV1{}, "Widget": &widgetV1{}},
		"v2": {"Gadget": &gadgetV2{}, "Widget": &widgetV2{}}} {
		gv := schema.GroupVersion{Group: group, Version: v}
		for kind, obj := range objs {
			s.AddKnownTypeWithName(gv.WithKind(kind), obj)
		}
		metav1.AddToGroupVersion(s, gv)
	}
	return s
}

// labeller is the mutating webhook of TestWebhooks: it labels every ConfigMap it admits mutated-by=webhook.
type labeller struct{}

func (labeller) Default(_ context.Context, cm *corev1.ConfigMap) error {
	cm.Labels["mutated-by"] = "webhook"
	return nil
}

// refuser is the validating webhook of TestWebhooks: it denies a ConfigMap whose data holds "forbidden".
type refuser struct{}

func (refuser) ValidateCreate(_ context.Context, cm *corev1.ConfigMap) (admission.Warnings, error) {
	if _, ok := cm.Data["forbidden"]; ok {
		return nil, fmt.Errorf("data.forbidden is forbidden")
	}
	return nil, nil
}

func (refuser) ValidateUpdate(context.Context, *corev1.ConfigMap, *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, nil
}

func (refuser) ValidateDelete(context.Context, *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, nil
}

// validatingWebhook is a validating webhook on the creation of ConfigMaps labelled webhooktest=selector,
// served at path, as an operator's manifests would give it (a service path).
func validatingWebhook(name, path, selector string, timeout int32) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{Name: name, AdmissionReviewVersions: []string{"v1"},
		ClientConfig:   admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "webhook-service", Namespace: "system", Path: ptr.To(path)}},
		FailurePolicy:  ptr.To(admissionregistrationv1.Fail),
		SideEffects:    ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds: ptr.To(timeout),
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"webhooktest": selector}},
		Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}
}

const (
	mutatingName   = "mconfigmap.webhooktest.ensemble.dev"
	validatingName = "vconfigmap.webhooktest.ensemble.dev"
	stallName      = "stall.webhooktest.ensemble.dev"
)

// TestWebhooks boots an operator whose Register sets up a mutating, a validating and a conversion webhook
// with controller-runtime's builder, and a handler that never answers; its manifests come from
// testdata/webhooks (a file) and from objects. The manager registered first has no webhooks, so the
// operator's manager serves them. Each subtest checks one promise of docs/architecture.md §3 Webhooks.
func TestWebhooks(t *testing.T) {
	if _, err := controlplane.AssetsDir(); err != nil {
		t.Skip(err)
	}
	g := NewWithT(t)
	s, err := Boot(t.Context(), Options{Scheme: webhookScheme(), WatchKinds: []client.Object{&corev1.ConfigMap{}},
		CRDDirectoryPaths: []string{"testdata/webhooks/gadget-crd.yaml", "testdata/webhooks/widget-crd.yaml"}, KubeControllers: []string{}, Pins: catalog{},
		Webhooks: WebhookOptions{Paths: []string{"testdata/webhooks/manifests.yaml"},
			Validating: []*admissionregistrationv1.ValidatingWebhookConfiguration{{ObjectMeta: metav1.ObjectMeta{Name: "validating-webhook-configuration"},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{
					validatingWebhook(validatingName, "/validate--v1-configmap", "on", 10),
					validatingWebhook(stallName, "/stall", "stall", 1)}}}},
		Managers: []ManagerOptions{{Name: "fake", Ungated: true, Register: noop}, {Name: "op", Register: func(_ context.Context, mgr manager.Manager) error {
			if err := (&marker{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return err
			}
			if err := ctrl.NewWebhookManagedBy(mgr, &corev1.ConfigMap{}).WithDefaulter(labeller{}).WithValidator(refuser{}).Complete(); err != nil {
				return err
			}
			if err := ctrl.NewWebhookManagedBy(mgr, &gadgetV1{}).Complete(); err != nil {
				return err
			}
			if err := ctrl.NewWebhookManagedBy(mgr, &widgetV1{}).WithConverter(widgetConverter).Complete(); err != nil {
				return err
			}
			// A handler that never answers: the API server gives up after the webhook's timeoutSeconds.
			mgr.GetWebhookServer().Register("/stall", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
			return nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}()
	g.Expect(s.hooks.serving).To(Equal("op"), "the first manager that registered a webhook handler serves webhooks")

	t.Run("loopback only", func(t *testing.T) {
		listening, err := listeners()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the test process listens on %v", listening)
		for _, l := range listening {
			if host, _, _ := net.SplitHostPort(l); !net.ParseIP(host).IsLoopback() {
				t.Errorf("the test process listens on %s, not on loopback", l)
			}
		}
		NewWithT(t).Expect(listening).To(ContainElement("127.0.0.1:"+strconv.Itoa(s.hooks.port)), "the webhook server is not among the listeners found")
	})

	t.Run("mutation", func(t *testing.T) {
		g := NewWithT(t)
		c := s.NewCase(t)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mutated", Labels: map[string]string{"webhooktest": "on"}}}
		g.Expect(c.Create(cm)).To(Succeed())
		g.Expect(cm.Labels).To(HaveKeyWithValue("mutated-by", "webhook"), "the mutating webhook did not label the ConfigMap")
		admits := c.Writes(WriteFilter{Verb: VerbAdmit, Name: "mutated"})
		g.Expect(admits).To(HaveLen(2), "want one admission by each webhook")
		m := admits[0]
		g.Expect(m.writer()).To(Equal("op/" + mutatingName))
		g.Expect(m.Kind).To(Equal("ConfigMap"))
		g.Expect(m.Admission).To(Equal(&Admission{Path: "/mutate--v1-configmap", Operation: "CREATE", Patch: []string{"add /metadata/labels/mutated-by"}}))
		g.Expect(admits[1].writer()).To(Equal("op/" + validatingName))
		g.Expect(admits[1].Admission.Patch).To(BeEmpty())
		g.Expect(admits[1].Err).NotTo(HaveOccurred())

		g.Expect(dumpedWrites(t, s, c)).To(ContainSubstring("op/" + mutatingName + " admit CREATE ConfigMap/" + c.Namespace + "/mutated at /mutate--v1-configmap patch: add /metadata/labels/mutated-by"))
	})

	// Fresh managers between runs of a spec (explore's batches): the manager serving the webhooks (op, started
	// after fake) starts first and serves the second run's admissions.
	t.Run("runs keep the webhooks served", func(t *testing.T) {
		defer func() { s.runs = [][]perturb.Point{nil} }()
		s.runs = [][]perturb.Point{nil, nil}
		p := &recordtb.TB{TestName: "webhook runs", Ginkgo: true}
		for run := 1; run <= 2; run++ {
			p.Run(func() {
				c := s.NewCase(p)
				c.OptOut(Convergence, "no controller reconciles what this spec writes")
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mutated", Labels: map[string]string{"webhooktest": "on"}}}
				if err := c.Create(cm); err != nil || cm.Labels["mutated-by"] != "webhook" {
					t.Errorf("run %d: create %v, labels %v: want the mutating webhook's label", run, err, cm.Labels)
				}
			})
			p.RunCleanups()
		}
		if msg := strings.Join(append(p.Fatals(), p.Errors()...), "\n"); msg != "" {
			t.Fatalf("two runs: %s", msg)
		}
	})

	t.Run("denial", func(t *testing.T) {
		g := NewWithT(t)
		c := s.NewCase(t)
		c.OptOut(Convergence, "no controller reconciles what this spec writes")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "refused", Labels: map[string]string{"webhooktest": "on"}},
			Data: map[string]string{"forbidden": "x"}}
		err := c.Create(cm)
		g.Expect(err).To(MatchError(ContainSubstring(`admission webhook "` + validatingName + `" denied the request: data.forbidden is forbidden`)))
		g.Expect(c.Writes(WriteFilter{Verb: VerbAdmit})).To(HaveLen(1), "a denial is a rejected admission, left out unless asked for")
		denied := c.Writes(WriteFilter{Verb: VerbAdmit, Controller: validatingName, IncludeRejected: true})
		g.Expect(denied).To(HaveLen(1))
		g.Expect(denied[0].Err).To(MatchError(ContainSubstring("data.forbidden is forbidden")))
		g.Expect(denied[0].line()).To(ContainSubstring("DENIED"))
	})

	t.Run("conversion", func(t *testing.T) {
		v1, v2 := &gadgetV1{ObjectMeta: metav1.ObjectMeta{Name: "g"}}, &gadgetV2{}
		v1.Spec.Colour = "red"
		c, conv := requireConverted(t, s, v1, v1.Spec.Colour, v2, func() string { return v2.Spec.Color }, "v2 was not read through the conversion webhook")
		g := NewWithT(t)
		g.Expect(conv.writer()).To(Equal("op/gadgets.webhooktest.ensemble.dev"))
		g.Expect([]any{conv.Kind, conv.Namespace, conv.UID, conv.ResourceVersion}).To(Equal([]any{"Gadget", c.Namespace, v1.UID, ""}))
		g.Expect(conv.Conversion).To(Equal(&Conversion{Path: "/convert", From: "webhooktest.ensemble.dev/v1", To: "webhooktest.ensemble.dev/v2"}))
		// A conversion is part of a read: the case's latest write, which quiescence waits on, is still the
		// spec's create.
		g.Expect(s.rec.lastWrite(c.Namespace)).To(BeTemporally("<", conv.Time), "the conversion moved the case's latest write")
		for _, w := range c.Writes(WriteFilter{Name: "g"}) {
			g.Expect(w.Verb).NotTo(Equal(VerbConvert), "a filter that names no verb returned a conversion, which is part of a read")
		}

		g.Expect(dumpedWrites(t, s, c)).To(ContainSubstring("op/gadgets.webhooktest.ensemble.dev convert Gadget/" + c.Namespace + "/g webhooktest.ensemble.dev/v1 -> v2 at /convert"))
		g.Expect(c.Delete(v1)).To(Succeed())
	})

	t.Run("registry conversion", func(t *testing.T) {
		// envtest leaves the Widget CRD's conversion None (its kinds are not convertible in the scheme):
		// Boot points it at /convert because the serving manager's converter registry converts Widgets.
		v1, v2 := &widgetV1{ObjectMeta: metav1.ObjectMeta{Name: "w"}}, &widgetV2{}
		v1.Spec.Colour = "blue"
		c, conv := requireConverted(t, s, v1, v1.Spec.Colour, v2, func() string { return v2.Spec.Color }, "v2 was not read through the converter registered with the manager")
		NewWithT(t).Expect(conv.Controller).To(Equal("widgets.webhooktest.ensemble.dev"), "the conversion does not name the Widget CRD")
		NewWithT(t).Expect(c.Delete(v1)).To(Succeed())
	})

	t.Run("one context a case", func(t *testing.T) {
		// GinkgoT().Context() makes a new context and registers a cleanup on every call: a case takes its
		// test's context once, not once a request.
		ct := &contextCountingT{T: t}
		c := s.NewCase(ct)
		c.OptOut(Convergence, "no controller reconciles what this spec writes")
		for range 3 {
			if err := c.Get("absent", &corev1.ConfigMap{}); err == nil {
				t.Fatal("a ConfigMap nobody created was found")
			}
		}
		if ct.calls != 1 {
			t.Fatalf("the case asked its test for a context %d times, want once", ct.calls)
		}
	})

	t.Run("no answer", func(t *testing.T) {
		requireOneLine(t, s, "stall", "suite: webhook "+stallName+" (path /stall, manager op) did not answer: context deadline exceeded: its handler did not answer within the webhook's timeoutSeconds")
	})

	t.Run("restart rebinds", func(t *testing.T) {
		g := NewWithT(t)
		s.mu.Lock()
		op := s.managers["op"]
		s.mu.Unlock()
		c := s.NewCase(t)
		p, err := perturb.Parse("restart@op#1")
		g.Expect(err).NotTo(HaveOccurred())
		c.Perturb(p)
		// The marker's first write restarts op.
		g.Expect(c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain"}})).To(Succeed())
		g.Eventually(func() *Manager {
			op.rmu.Lock()
			defer op.rmu.Unlock()
			return op.successor
		}).WithTimeout(patience).ShouldNot(BeNil(), "op was never restarted")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Labels: map[string]string{"webhooktest": "on"}}}
		g.Eventually(func() error { return c.Create(cm) }).WithTimeout(patience).Should(Succeed(), "the restarted manager does not serve webhooks")
		g.Expect(cm.Labels).To(HaveKeyWithValue("mutated-by", "webhook"))
		g.Expect(s.hooks.serving).To(Equal("op"))
	})

	t.Run("server stopped", func(t *testing.T) {
		s.mu.Lock()
		op := s.managers["op"]
		s.mu.Unlock()
		if err := op.Stop(); err != nil {
			t.Fatal(err)
		}
		requireOneLine(t, s, "on", "suite: webhook "+mutatingName+" (path /mutate--v1-configmap, no manager serves webhooks) did not answer: ")

		c := s.NewCase(t)
		c.OptOut(Convergence, "no controller reconciles what this spec writes")
		v1 := &gadgetV1{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
		if err := c.Create(v1); err != nil {
			t.Fatal(err)
		}
		err := c.Get("g", &gadgetV2{})
		t.Logf("%v", err)
		want := "suite: the conversion webhook of Gadget (webhooktest.ensemble.dev/v1) (path /convert, no manager serves webhooks) did not answer: "
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("got %v, want one line beginning %q", err, want)
		}
		if err := c.Delete(v1); err != nil {
			t.Fatal(err)
		}
	})
}

// dumpedWrites dumps c as a failure would and returns the dump's writes.txt, logging it.
func dumpedWrites(t *testing.T, s *Suite, c *Case) string {
	t.Helper()
	dir, _, err := s.dump(c.Namespace, t.Name(), c.Started)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b, err := os.ReadFile(filepath.Join(dir, "writes.txt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writes.txt:\n%s", b)
	return string(b)
}

// requireConverted creates v1, whose spec.colour is colour, in a new case, reads it as v2 and requires v2's
// spec.color (color) to be colour too: without a conversion webhook the API server would only relabel the
// object (strategy None) and prune spec.colour, which v2 does not know. It requires the conversion to be
// recorded and returns the case and the last conversion of v1; the caller deletes v1.
func requireConverted(t *testing.T, s *Suite, v1 client.Object, colour string, v2 client.Object, color func() string, why string) (*Case, Write) {
	g := NewWithT(t)
	c := s.NewCase(t)
	c.OptOut(Convergence, "no controller reconciles what this spec writes")
	g.Expect(c.Create(v1)).To(Succeed())
	g.Expect(c.Get(v1.GetName(), v2)).To(Succeed())
	g.Expect(color()).To(Equal(colour), why)
	convs := c.Writes(WriteFilter{Verb: VerbConvert, Name: v1.GetName()})
	g.Expect(convs).NotTo(BeEmpty(), "the conversion of %s to v2 was not recorded", v1.GetName())
	return c, convs[len(convs)-1]
}

// requireOneLine creates a ConfigMap labelled webhooktest=selector in a new case and requires its error to
// be one line that begins with want.
func requireOneLine(t *testing.T, s *Suite, selector, want string) {
	c := s.NewCase(t)
	c.OptOut(Convergence, "no controller reconciles what this spec writes")
	err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unanswered", Labels: map[string]string{"webhooktest": selector}}})
	t.Logf("%v", err)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want one line beginning %q", err, want)
	}
}

// listeners returns the addresses the test process's TCP sockets listen on ("127.0.0.1:port",
// "[::1]:port", "0.0.0.0:port"), read from /proc: the sockets of the network namespace in LISTEN state
// whose inode one of the process's file descriptors holds.
func listeners() ([]string, error) {
	own := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			own[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, file := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !own[f[9]] { // 0A: LISTEN
				continue
			}
			hexIP, hexPort, _ := strings.Cut(f[1], ":")
			port, _ := strconv.ParseUint(hexPort, 16, 16)
			out = append(out, net.JoinHostPort(procAddr(hexIP).String(), strconv.FormatUint(port, 10)))
		}
	}
	return out, nil
}

// procAddr reads an address of /proc/net/tcp or tcp6: 32-bit words of hex, each in the machine's
// (little-endian) byte order.
func procAddr(h string) net.IP {
	var b []byte
	for i := 0; i+8 <= len(h); i += 8 {
		w, _ := strconv.ParseUint(h[i:i+8], 16, 32)
		b = append(b, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	return net.IP(b)
}

// contextCountingT counts the calls of Context, which GinkgoT answers with a new context and cleanup each time.
type contextCountingT struct {
	*testing.T
	calls int
}

func (t *contextCountingT) Context() context.Context { t.calls++; return t.T.Context() }
