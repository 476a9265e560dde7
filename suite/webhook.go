package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"
)

// WebhookOptions are the operator's admission webhook configurations. Boot installs them once the managers
// of Options.Managers have started, each webhook pointed at the manager that serves webhooks
// (docs/architecture.md §3 Webhooks).
type WebhookOptions struct {
	// Paths are files or directories (not searched recursively) of the operator's manifests, whose
	// MutatingWebhookConfiguration and ValidatingWebhookConfiguration documents (admissionregistration.k8s.io/v1)
	// are installed; other documents are skipped. A kubebuilder project keeps them in config/webhook
	// (ModuleDir finds a dependency's). A relative path is resolved against the working directory.
	Paths []string
	// Mutating and Validating are configurations given as objects, installed with those read from Paths.
	Mutating   []*admissionregistrationv1.MutatingWebhookConfiguration
	Validating []*admissionregistrationv1.ValidatingWebhookConfiguration
}

// Admission is what an admission webhook answered, on a Write of VerbAdmit.
type Admission struct {
	// Path is where the serving manager's webhook server serves the webhook, e.g. "/mutate--v1-pod".
	Path string
	// Operation is the admitted request's: CREATE, UPDATE, DELETE or CONNECT.
	Operation string
	// Patch lists the JSON patch operations a mutating webhook answered, each "op path" with the path a
	// JSON pointer ("add /metadata/labels/app"); empty when it changed nothing or denied the request.
	Patch []string
}

// Conversion is the conversion a CRD's conversion webhook was asked for, on a Write of VerbConvert.
type Conversion struct {
	// Path is where the serving manager answers the conversion webhook: "/convert".
	Path string
	// From is the object's apiVersion as the API server sent it ("example.com/v1"), To the apiVersion the
	// API server asked for ("example.com/v2").
	From, To string
}

// version is c.To without its group when it is From's ("v2"), else c.To whole.
func (c *Conversion) version() string {
	group, version, ok := strings.Cut(c.To, "/")
	if ok && strings.HasPrefix(c.From, group+"/") {
		return version
	}
	return c.To
}

// conversionPath is where envtest points every CRD's conversion webhook, and where controller-runtime's
// builder registers its conversion handler.
const conversionPath = "/convert"

// webhookProbePath is where the serving manager answers the harness's own probe webhooks, which tell Boot
// that the API server applies the operator's configurations (see awaitWebhooks).
const webhookProbePath = "/ensemble-webhook-probe"

// webhookProbeLabel marks the dry-run ConfigMap the probe webhooks match.
const webhookProbeLabel = "ensemble.dev/webhook-probe"

// webhooks is the suite's webhook serving: the loopback address and certificates envtest chose, the
// configurations Boot installs, and the manager that serves them.
type webhooks struct {
	host    string
	port    int
	certDir string
	ca      []byte
	// mutating and validating are the operator's configurations, pointed at host:port; names holds the
	// names of the webhooks served at each path; conversion names the CRDs whose conversion webhook
	// (always /convert) the serving manager must answer, and crds names each of those CRDs by its group
	// and kind.
	mutating   []*admissionregistrationv1.MutatingWebhookConfiguration
	validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	names      map[string][]string
	conversion []string
	crds       map[schema.GroupKind]string
	// registered are the installed CRDs that serve two or more versions without a conversion webhook:
	// installConversions points those whose kind the serving manager's converter registry converts at /convert.
	registered []*apiextensionsv1.CustomResourceDefinition
	// probed counts the calls of the probe webhooks: mutating, validating.
	probed [2]atomic.Int64

	mu sync.Mutex
	// serving is the name of the manager that serves webhooks ("" for none): the first started whose
	// Register registered a handler. It keeps the name across a restart point's restart, and gives it up
	// when its owner stops it.
	serving string
	// paths are the paths the serving manager's Register registered.
	paths []string
}

// readWebhooks reads opts's configurations (an error names the path or file at fault and what to do).
func readWebhooks(opts WebhookOptions) (*webhooks, error) {
	mutating, validating, err := readWebhookPaths(opts.Paths)
	if err != nil {
		return nil, err
	}
	h := &webhooks{names: map[string][]string{}, crds: map[schema.GroupKind]string{}}
	for _, c := range append(slices.Clone(opts.Mutating), mutating...) {
		h.mutating = append(h.mutating, c.DeepCopy())
	}
	for _, c := range append(slices.Clone(opts.Validating), validating...) {
		h.validating = append(h.validating, c.DeepCopy())
	}
	return h, nil
}

// pointAt points every webhook at the loopback address and certificates envtest prepared in env, which
// also pointed the conversion webhook of each CRD whose kind is convertible in the scheme at its /convert;
// it keeps the other CRDs serving several versions for installConversions. Error: a webhook that names no
// path.
func (h *webhooks) pointAt(env *envtest.Environment) error {
	wio := env.WebhookInstallOptions
	h.host, h.port, h.certDir, h.ca = wio.LocalServingHost, wio.LocalServingPort, wio.LocalServingCertDir, wio.LocalServingCAData
	for _, crd := range env.CRDs {
		if c := crd.Spec.Conversion; c != nil && c.Strategy == apiextensionsv1.WebhookConverter {
			h.conversion = append(h.conversion, crd.Name)
			h.crds[schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}] = crd.Name
		} else if served := slices.DeleteFunc(slices.Clone(crd.Spec.Versions), func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
			return !v.Served
		}); len(served) > 1 {
			h.registered = append(h.registered, crd.DeepCopy())
			// Named here, before any manager serves, so the map is only read once conversions are answered.
			h.crds[schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}] = crd.Name
		}
	}
	for _, c := range h.mutating {
		for i := range c.Webhooks {
			if err := h.point(c.Name, c.Webhooks[i].Name, &c.Webhooks[i].ClientConfig); err != nil {
				return err
			}
		}
	}
	for _, c := range h.validating {
		for i := range c.Webhooks {
			if err := h.point(c.Name, c.Webhooks[i].Name, &c.Webhooks[i].ClientConfig); err != nil {
				return err
			}
		}
	}
	return nil
}

// point sets cc to reach the suite's webhook server at the path the configuration named: a service's path,
// or the path of a URL (its host is replaced). Error: a webhook with neither.
func (h *webhooks) point(config, name string, cc *admissionregistrationv1.WebhookClientConfig) error {
	path := ""
	switch {
	case cc.Service != nil && cc.Service.Path != nil:
		path = *cc.Service.Path
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return fmt.Errorf("suite: webhook %q of configuration %s: its clientConfig.url %q does not parse: %v", name, config, *cc.URL, err)
		}
		path = u.Path
	}
	if path == "" {
		return fmt.Errorf("suite: webhook %q of configuration %s names no path (clientConfig.service.path or clientConfig.url): give it the path the operator registers its handler at", name, config)
	}
	path = "/" + strings.TrimLeft(path, "/")
	cc.Service, cc.URL, cc.CABundle = nil, ptr.To("https://"+net.JoinHostPort(h.host, strconv.Itoa(h.port))+path), h.ca
	if !slices.Contains(h.names[path], name) {
		h.names[path] = append(h.names[path], name)
	}
	return nil
}

// readWebhookPaths reads the webhook configurations of every .yaml, .yml and .json file of paths. Errors: a
// path that does not exist, a document that does not parse, a configuration of another API version.
func readWebhookPaths(paths []string) ([]*admissionregistrationv1.MutatingWebhookConfiguration, []*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	wd, _ := os.Getwd()
	for _, p := range paths {
		abs, files, err := manifestFiles(wd, p)
		if err != nil {
			return nil, nil, fmt.Errorf("suite: webhook path %q does not exist (resolved to %s from %s): pass the directory or file that holds the operator's webhook configurations (config/webhook in a kubebuilder project)", p, abs, wd)
		}
		found := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, nil, fmt.Errorf("suite: webhook file %s: %v", f, err)
			}
			for i, doc := range docSeparator.Split(string(b), -1) {
				if strings.TrimSpace(doc) == "" {
					continue
				}
				var meta metav1.TypeMeta
				if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
					return nil, nil, fmt.Errorf("suite: webhook file %s, document %d: %v: fix the YAML", f, i+1, err)
				}
				var into any
				switch meta.Kind {
				case "MutatingWebhookConfiguration":
					c := &admissionregistrationv1.MutatingWebhookConfiguration{}
					mutating, into = append(mutating, c), c
				case "ValidatingWebhookConfiguration":
					c := &admissionregistrationv1.ValidatingWebhookConfiguration{}
					validating, into = append(validating, c), c
				default:
					continue
				}
				if meta.APIVersion != admissionregistrationv1.SchemeGroupVersion.String() {
					return nil, nil, fmt.Errorf("suite: webhook file %s, document %d: a %s of %s: only %s is installed; regenerate the manifests", f, i+1, meta.Kind, meta.APIVersion, admissionregistrationv1.SchemeGroupVersion)
				}
				if err := yaml.Unmarshal([]byte(doc), into); err != nil {
					return nil, nil, fmt.Errorf("suite: webhook file %s, document %d: %v: fix the YAML", f, i+1, err)
				}
				found++
			}
		}
		if found == 0 {
			return nil, nil, fmt.Errorf("suite: webhook path %q (%s) holds no MutatingWebhookConfiguration or ValidatingWebhookConfiguration: pass the directory that holds them (config/webhook in a kubebuilder project)", p, abs)
		}
	}
	return mutating, validating, nil
}

// webhookServer is the webhook.Server of every manager (manager.Options.WebhookServer), on the loopback
// address envtest chose. Register records every admission and conversion the handler answers (see
// recordingHandler). Only
// the serving manager's server listens; the others' Start waits for the manager to stop.
type webhookServer struct {
	webhook.Server
	s       *Suite
	manager string
	mu      sync.Mutex
	paths   []string
	serves  bool
}

// newServer returns the webhook server of manager.
func (h *webhooks) newServer(s *Suite, manager string) *webhookServer {
	return &webhookServer{s: s, manager: manager,
		Server: webhook.NewServer(webhook.Options{Host: h.host, Port: h.port, CertDir: h.certDir})}
}

// Register registers hook at path, wrapped so that each admission or conversion it answers is recorded.
func (w *webhookServer) Register(path string, hook http.Handler) {
	w.mu.Lock()
	w.paths = append(w.paths, path)
	w.mu.Unlock()
	w.Server.Register(path, w.s.recordingHandler(w.manager, path, hook))
}

// Start serves when this manager serves webhooks; otherwise it waits until ctx is done.
func (w *webhookServer) Start(ctx context.Context) error {
	if !w.serves {
		<-ctx.Done()
		return nil
	}
	return w.Server.Start(ctx)
}

// claim makes w's manager the one that serves webhooks when its Register registered a handler and no other
// manager serves (or this one did before a restart point restarted it). Called before the manager starts.
func (h *webhooks) claim(w *webhookServer) {
	w.mu.Lock()
	paths := slices.Clone(w.paths)
	w.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(paths) == 0 || (h.serving != "" && h.serving != w.manager) {
		return
	}
	h.serving, h.paths, w.serves = w.manager, paths, true
	if len(h.mutating)+len(h.validating) > 0 {
		w.Server.Register(webhookProbePath+"/mutating", h.probe(0))
		w.Server.Register(webhookProbePath+"/validating", h.probe(1))
	}
}

// serves reports whether manager is the one that serves webhooks; false when none does (h nil included).
func (h *webhooks) serves(manager string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.serving != "" && h.serving == manager
}

// release gives up serving webhooks when manager served them (its owner stopped it).
func (h *webhooks) release(manager string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.serving == manager {
		h.serving, h.paths = "", nil
	}
	h.mu.Unlock()
}

// unserved returns, one per line, each configured webhook whose path the serving manager does not answer
// and each CRD whose conversion webhook it does not answer (/convert).
func (h *webhooks) unserved() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	served := func(path string) bool {
		return slices.ContainsFunc(h.paths, func(p string) bool { return "/"+strings.TrimLeft(p, "/") == path })
	}
	var out []string
	for path, names := range h.names {
		if !served(path) {
			out = append(out, fmt.Sprintf("webhook %s at %s", strings.Join(names, ", "), path))
		}
	}
	sort.Strings(out)
	for _, crd := range h.conversion {
		if !served(conversionPath) {
			out = append(out, fmt.Sprintf("the conversion webhook of CRD %s at %s", crd, conversionPath))
		}
	}
	return out
}

// installWebhooks checks that the serving manager answers every configured webhook and conversion, installs
// the configurations and waits (Options.StartTimeout) until the API server calls them. Errors: a webhook
// or conversion no manager registered a handler for, the API server's refusal, a wait that timed out.
func (s *Suite) installWebhooks(ctx context.Context) error {
	h := s.hooks
	convert := s.registeredConversions()
	if missing := h.unserved(); len(missing) > 0 {
		who := "no manager registered a webhook handler, so nothing answers"
		if h.serving != "" {
			who = "manager " + h.serving + " serves webhooks but does not answer"
		}
		return fmt.Errorf("suite: %s %s: register the operator's webhooks in its ManagerOptions.Register as its main does (ctrl.NewWebhookManagedBy, mgr.GetWebhookServer().Register), or leave the configuration out of Options.Webhooks",
			who, strings.Join(missing, "; "))
	}
	if err := s.installConversions(ctx, convert); err != nil {
		return err
	}
	if len(h.mutating)+len(h.validating) == 0 {
		return nil
	}
	for _, c := range h.mutating {
		if err := s.Client.Create(ctx, c.DeepCopy()); err != nil {
			return fmt.Errorf("suite: installing MutatingWebhookConfiguration %s: %w", c.Name, err)
		}
	}
	for _, c := range h.validating {
		if err := s.Client.Create(ctx, c.DeepCopy()); err != nil {
			return fmt.Errorf("suite: installing ValidatingWebhookConfiguration %s: %w", c.Name, err)
		}
	}
	return s.awaitWebhooks(ctx)
}

// registeredConversions returns the CRDs pointAt kept whose GroupKind the serving manager's converter
// registry (mgr.GetConverterRegistry(), which ctrl.NewWebhookManagedBy(...).WithConverter fills) converts,
// and names each in h.conversion, so that unserved checks that the manager answers /convert.
func (s *Suite) registeredConversions() []*apiextensionsv1.CustomResourceDefinition {
	h := s.hooks
	h.mu.Lock()
	serving := h.serving
	h.mu.Unlock()
	s.mu.Lock()
	m := s.managers[serving]
	s.mu.Unlock()
	if m == nil {
		return nil
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, crd := range h.registered {
		if _, ok := m.mgr.GetConverterRegistry().GetConverter(schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}); ok {
			out = append(out, crd)
			h.conversion = append(h.conversion, crd.Name)
		}
	}
	return out
}

// installConversions points the conversion of each of crds at the serving manager's /convert, as envtest
// does for a kind convertible in the scheme, and waits (Options.StartTimeout) until the API server converts
// through it.
//
// The API server applies a CRD's new conversion once its handler of the CRD watch drops the CRD's serving
// storage, with nothing in the CRD's status to tell, and it converts only objects it reads, which the
// operator's kinds have none of yet. So the harness creates a CRD of its own, ensemble.dev's
// ConversionProbe (two versions, conversion None) and one object of it, points the operator's CRDs and then
// the probe's at a webhook, and reads the object at its other version until the API server fails to call
// the probe's webhook (it is at a path nothing serves): the API server's handler takes the CRD updates in
// order, so the operator's CRDs convert through /convert from then on. The probe CRD is deleted; the
// operator's webhooks and converters are not called. Errors: the API server's refusal, a wait that timed
// out.
func (s *Suite) installConversions(ctx context.Context, crds []*apiextensionsv1.CustomResourceDefinition) error {
	h := s.hooks
	if len(crds) == 0 {
		return nil
	}
	// The operator's scheme need not know CRDs.
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(s.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("suite: client: %w", err)
	}
	fail := func(err error) error {
		return fmt.Errorf("suite: pointing the conversion of CRD %s at /convert: %w", crds[0].Name, err)
	}
	base := "https://" + net.JoinHostPort(h.host, strconv.Itoa(h.port))
	probe, err := s.createConversionProbe(ctx, c)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), probe) }()
	for _, want := range append(slices.Clone(crds), probe) {
		url := base + "/convert"
		if want == probe {
			url = base + webhookProbePath + "/conversion-unserved"
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: want.Name}, crd); err != nil {
				return err
			}
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1", "v1beta1"},
					ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: ptr.To(url), CABundle: h.ca}}}
			return c.Update(ctx, crd)
		})
		if err != nil {
			return fmt.Errorf("suite: pointing the conversion of CRD %s at its webhook: %w", want.Name, err)
		}
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(conversionProbeGroup + "/v2")
	obj.SetKind("ConversionProbe")
	var last error
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, s.startTimeout, true, func(ctx context.Context) (bool, error) {
		last = c.Get(ctx, client.ObjectKey{Name: "probe"}, obj)
		return last != nil && conversionCall.MatchString(last.Error()), nil
	})
	if err != nil {
		return fmt.Errorf("suite: the API server did not apply the conversion webhook of CRD %s within %s (Options.StartTimeout); the last probe answered: %v",
			crds[0].Name, s.startTimeout, last)
	}
	return nil
}

// conversionProbeGroup is the API group of installConversions' probe CRD.
const conversionProbeGroup = "ensemble.dev"

// createConversionProbe creates the probe CRD of installConversions, waits until it is established and
// creates its object, at v1, so that the API server serves it with conversion None until told otherwise.
func (s *Suite) createConversionProbe(ctx context.Context, c client.Client) (*apiextensionsv1.CustomResourceDefinition, error) {
	anything := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
		XPreserveUnknownFields: ptr.To(true)}}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "conversionprobes." + conversionProbeGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: conversionProbeGroup, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "ConversionProbe", ListKind: "ConversionProbeList",
				Plural: "conversionprobes", Singular: "conversionprobe"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true, Schema: anything},
				{Name: "v2", Served: true, Schema: anything}}}}
	if err := c.Create(ctx, crd); err != nil {
		return nil, fmt.Errorf("creating the conversion probe CRD: %w", err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(conversionProbeGroup + "/v1")
	obj.SetKind("ConversionProbe")
	obj.SetName("probe")
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, s.startTimeout, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, obj.DeepCopy())
		return last == nil, nil
	})
	if err != nil {
		_ = c.Delete(context.WithoutCancel(ctx), crd)
		return nil, fmt.Errorf("creating the conversion probe object within %s (Options.StartTimeout): %v", s.startTimeout, last)
	}
	return crd, nil
}

// awaitWebhooks returns once the API server applies the configurations just installed. It installs a
// mutating and a validating probe webhook after them, each matching only a dry-run ConfigMap labelled
// webhookProbeLabel, and sends that dry run until the serving manager answered both: the API server reads
// each kind of configuration from one watch, in order, so it then applies the operator's too. The probes
// are deleted before it returns. Errors: the probes not called within Options.StartTimeout.
func (s *Suite) awaitWebhooks(ctx context.Context) error {
	h := s.hooks
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	url := "https://" + net.JoinHostPort(h.host, strconv.Itoa(h.port)) + webhookProbePath
	hook := func(kind string) (admissionregistrationv1.WebhookClientConfig, []admissionregistrationv1.RuleWithOperations, *metav1.LabelSelector, string) {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url + "/" + kind), CABundle: h.ca},
			[]admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			&metav1.LabelSelector{MatchLabels: map[string]string{webhookProbeLabel: nonce}}, kind + ".probe.ensemble.dev"
	}
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	cc, rules, sel, name := hook("mutating")
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "ensemble-probe-" + nonce},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: name, ClientConfig: cc, Rules: rules, ObjectSelector: sel,
			SideEffects: none, AdmissionReviewVersions: []string{"v1"}}}}
	cc, rules, sel, name = hook("validating")
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "ensemble-probe-" + nonce},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: name, ClientConfig: cc, Rules: rules, ObjectSelector: sel,
			SideEffects: none, AdmissionReviewVersions: []string{"v1"}}}}
	for _, c := range []client.Object{mutating, validating} {
		if err := s.Client.Create(ctx, c); err != nil {
			return fmt.Errorf("suite: installing the webhook probe: %w", err)
		}
		defer func() { _ = s.Client.Delete(context.WithoutCancel(ctx), c) }()
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, s.startTimeout, true, func(ctx context.Context) (bool, error) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "ensemble-webhook-probe-",
			Labels: map[string]string{webhookProbeLabel: nonce}}}
		last = s.Client.Create(ctx, cm, client.DryRunAll)
		return h.probed[0].Load() > 0 && h.probed[1].Load() > 0, nil
	})
	if err != nil {
		return fmt.Errorf("suite: the API server did not call the webhooks of manager %s within %s (Options.StartTimeout); the last probe answered: %v", h.serving, s.startTimeout, last)
	}
	return nil
}

// probe answers a probe webhook, mutating (i 0) or validating (1): it allows the request and counts the call.
func (h *webhooks) probe(i int) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		review := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
			http.Error(rw, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		h.probed[i].Add(1)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(rw).Encode(review)
	})
}

// recordingHandler wraps the handler manager registered at path: when path serves a configured admission
// webhook, each request it answers is recorded as a Write of VerbAdmit (see recordAdmission); when it is
// /convert and a CRD's conversion webhook is configured, each object it converts as a Write of VerbConvert
// (see recordConversion). Other paths are served unwrapped.
func (s *Suite) recordingHandler(manager, path string, hook http.Handler) http.Handler {
	path = "/" + strings.TrimLeft(path, "/")
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		names := s.hooks.names[path]
		convert := len(names) == 0 && path == conversionPath && len(s.hooks.conversion) > 0
		if len(names) == 0 && !convert {
			hook.ServeHTTP(rw, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		out := &teeWriter{ResponseWriter: rw}
		hook.ServeHTTP(out, r)
		if convert {
			s.recordConversion(manager, path, body, out.body.Bytes())
		} else {
			s.recordAdmission(manager, path, names, body, out.body.Bytes())
		}
	})
}

// teeWriter keeps a copy of what a handler writes.
type teeWriter struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (t *teeWriter) Write(b []byte) (int, error) {
	t.body.Write(b)
	return t.ResponseWriter.Write(b)
}

// recordAdmission records one admission as a Write of VerbAdmit by manager, its Controller the webhook's
// name (the path when several webhooks share it): the object, the operation and subresource, the JSON patch
// a mutating webhook answered, and a denial as the write's Err. A request or answer that is not an
// AdmissionReview is not recorded.
func (s *Suite) recordAdmission(manager, path string, names []string, req, resp []byte) {
	var in, out admissionv1.AdmissionReview
	if json.Unmarshal(req, &in) != nil || in.Request == nil || json.Unmarshal(resp, &out) != nil || out.Response == nil {
		return
	}
	r := in.Request
	name := path
	if len(names) == 1 {
		name = names[0]
	}
	w := Write{Time: time.Now(), Manager: manager, Controller: name, Verb: VerbAdmit, Subresource: r.SubResource,
		Kind: r.Kind.Kind, Namespace: r.Namespace, Name: r.Name, Admission: &Admission{Path: path, Operation: string(r.Operation)}}
	raw := r.Object.Raw
	if len(raw) == 0 {
		raw = r.OldObject.Raw
	}
	var obj metav1.PartialObjectMetadata
	if json.Unmarshal(raw, &obj) == nil {
		w.UID = obj.UID
		if w.Name == "" {
			w.Name = obj.Name
		}
	}
	if !out.Response.Allowed {
		msg := "denied"
		if out.Response.Result != nil && out.Response.Result.Message != "" {
			msg = out.Response.Result.Message
		}
		w.Err = fmt.Errorf("admission webhook %q denied the request: %s", name, msg)
	}
	var ops []struct{ Op, Path string }
	if json.Unmarshal(out.Response.Patch, &ops) == nil {
		for _, op := range ops {
			w.Admission.Patch = append(w.Admission.Patch, op.Op+" "+op.Path)
		}
	}
	s.rec.addWrite(w)
}

// recordConversion records each object of one ConversionReview as a Write of VerbConvert by manager, its
// Controller the name of the object's CRD ("conversion" for a kind of no configured CRD): the object's kind,
// key and uid, the apiVersion it was sent in and the one asked for, and the review's failure as the write's
// Err. A request or answer that is not a ConversionReview is not recorded.
func (s *Suite) recordConversion(manager, path string, req, resp []byte) {
	var in, out apiextensionsv1.ConversionReview
	if json.Unmarshal(req, &in) != nil || in.Request == nil || json.Unmarshal(resp, &out) != nil || out.Response == nil {
		return
	}
	var failed error
	if res := out.Response.Result; res.Status != metav1.StatusSuccess {
		msg := res.Message
		if msg == "" {
			msg = "no message"
		}
		failed = fmt.Errorf("conversion webhook failed the conversion to %s: %s", in.Request.DesiredAPIVersion, msg)
	}
	now := time.Now()
	for _, raw := range in.Request.Objects {
		var obj metav1.PartialObjectMetadata
		if json.Unmarshal(raw.Raw, &obj) != nil {
			continue
		}
		name := s.hooks.crds[obj.GroupVersionKind().GroupKind()]
		if name == "" {
			name = "conversion"
		}
		s.rec.addWrite(Write{Time: now, Manager: manager, Controller: name, Verb: VerbConvert, Kind: obj.Kind,
			Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID, Err: failed,
			Conversion: &Conversion{Path: path, From: obj.APIVersion, To: in.Request.DesiredAPIVersion}})
	}
}

// webhookCall matches the API server's error for an admission webhook it could not call, conversionCall
// that for a CRD's conversion webhook.
var (
	webhookCall    = regexp.MustCompile(`failed calling webhook "([^"]+)": (.*)`)
	conversionCall = regexp.MustCompile(`conversion webhook for (\S+), Kind=(\S+) failed: (.*)`)
)

// webhookError is an error of the API server's about a webhook that did not answer, said in one line; it
// wraps the API server's error.
type webhookError struct {
	line string
	err  error
}

func (e *webhookError) Error() string { return e.line }
func (e *webhookError) Unwrap() error { return e.err }

// webhookHint turns the API server's error for a webhook that did not answer (admission or conversion) into
// one line naming the webhook, its path and the manager meant to serve it, the short cause and what to do;
// other errors are returned as they are.
func (s *Suite) webhookHint(err error) error {
	if err == nil || s.hooks == nil {
		return err
	}
	var name, path, cause string
	if m := webhookCall.FindStringSubmatch(err.Error()); m != nil {
		name, cause = "webhook "+m[1], m[2]
		for p, names := range s.hooks.names {
			if slices.Contains(names, m[1]) {
				path = p
			}
		}
	} else if m := conversionCall.FindStringSubmatch(err.Error()); m != nil {
		name, path, cause = "the conversion webhook of "+m[2]+" ("+m[1]+")", conversionPath, m[3]
	} else {
		return err
	}
	// "failed to call webhook: Post \"https://...\": dial tcp ...: connect: connection refused": the cause is
	// what follows the URL.
	if i := strings.LastIndex(cause, `": `); i >= 0 {
		cause = cause[i+3:]
	}
	s.hooks.mu.Lock()
	serving := s.hooks.serving
	s.hooks.mu.Unlock()
	where, todo := "", ""
	switch {
	case path == "":
		where = "(not one of Options.Webhooks)"
		todo = "configure it through Options.Webhooks, so that it is pointed at the manager that serves webhooks"
	case serving == "":
		where = fmt.Sprintf("(path %s, no manager serves webhooks)", path)
		todo = "the manager that served webhooks was stopped; start one whose Register registers the operator's webhooks"
	default:
		where = fmt.Sprintf("(path %s, manager %s)", path, serving)
		switch {
		case strings.Contains(cause, "connection refused"):
			todo = "the manager's webhook server is not listening (stopped or restarting)"
		case strings.Contains(cause, "deadline exceeded") || strings.Contains(cause, "Timeout"):
			todo = "its handler did not answer within the webhook's timeoutSeconds; find where it blocks"
		default:
			todo = "check the handler the manager registers at that path"
		}
	}
	return &webhookError{line: fmt.Sprintf("suite: %s %s did not answer: %s: %s", name, where, strings.ReplaceAll(cause, "\n", " "), todo), err: err}
}
