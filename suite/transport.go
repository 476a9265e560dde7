package suite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// auditSeq numbers the Audit-IDs of this process.
var auditSeq atomic.Int64

// writer is who a recording transport records writes as.
type writer struct {
	// manager names the writer (ManagerOptions.Name, or caseManager); controller is the fallback outside a
	// pass ("spec" for a Case).
	manager, controller string
	// caseNS is the namespace of the Case whose client this is; "" for a manager's.
	caseNS string
	// ungated is set for a manager the gate does not apply to (ManagerOptions.Ungated).
	ungated bool
	// userAgent is the User-Agent of the config the transport was made for (see component).
	userAgent string
	// fence, when not nil, is set once a restart point stopped the manager instance: every later write is
	// refused, as a crashed process makes none.
	fence *atomic.Pointer[perturb.Point]
}

// component is the name a client of the writer gave itself with rest.AddUserAgent (which puts it after
// client-go's default User-Agent) or by extending the writer's, e.g. LeaderElection; "" for none.
func (w writer) component(ua string) string {
	for _, base := range []string{rest.DefaultKubernetesUserAgent(), w.userAgent} {
		if c, ok := strings.CutPrefix(ua, base+"/"); ok && base != "" && !strings.Contains(c, "/") {
			return c
		}
	}
	return ""
}

// recordingTransport records every write request that goes through it as made by w, whatever client sent
// it (the manager's client, a typed clientset or a dynamic client built on the manager's rest.Config):
// attributed to the reconcile pass the request's context carries, checked against the case's perturbation
// points first (a point that fires answers with its error and the request is never sent), and claimed for
// a Case when it creates a cluster-scoped object (see scopes). Reads pass through. Every request gets an
// Audit-ID under auditIDPrefix. A nil s only sets the Audit-ID (the administrator client).
type recordingTransport struct {
	s    *Suite
	w    writer
	next http.RoundTripper
}

// wrapTransport returns a rest.Config WrapTransport that records as w (nil s: Audit-ID only), chained after
// the config's own.
func (s *Suite) wrapTransport(cfg *rest.Config, w writer) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recordingTransport{s: s, w: w, next: rt} })
}

// recordedClient returns a client of the suite's API server (uncached, the suite's scheme and REST mapper)
// whose writes are recorded as w's. Errors: the client cannot be built from Suite.Config.
func (s *Suite) recordedClient(w writer) (client.Client, error) {
	cfg := rest.CopyConfig(s.Config)
	cfg.UserAgent = "ensemble-" + w.manager + "/v0"
	w.userAgent = cfg.UserAgent
	s.wrapTransport(cfg, w)
	return client.New(cfg, client.Options{Scheme: s.scheme, Mapper: s.Client.RESTMapper()})
}

var writeVerbs = sets.New("create", "update", "patch", "delete", "deletecollection")

var requestInfos = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Audit-ID", auditIDPrefix+strconv.FormatInt(auditSeq.Add(1), 10))
	if t.s == nil {
		return t.next.RoundTrip(req)
	}
	info, err := requestInfos.NewRequestInfo(req)
	if err == nil && info.IsResourceRequest && t.s.reads != nil && (info.Verb == "get" || info.Verb == "list") {
		return t.noteRead(req, info)
	}
	if err != nil || !info.IsResourceRequest || !writeVerbs.Has(info.Verb) {
		return t.next.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil {
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	s, ctx := t.s, req.Context()
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	w := Write{Manager: t.w.manager, Controller: t.w.controller, Verb: verbOf(info.Verb, req.Header.Get("Content-Type")),
		Subresource: info.Subresource, Namespace: info.Namespace, Name: info.Name,
		FieldOwner: req.URL.Query().Get("fieldManager")}
	runnable := runnableFrom(ctx)
	if p := passFrom(ctx); p != nil {
		w.Pass, w.Controller = p.ID, p.Controller
	} else if runnable != "" {
		w.Controller = runnable
	} else if component := t.w.component(req.UserAgent()); component != "" {
		w.Controller = component
	}
	sent := s.decodeMeta(body, req.Header.Get("Content-Type"))
	if w.Name == "" && w.Verb != VerbDeleteAllOf {
		w.Name = sent.name
	}
	w.UID = sent.uid
	if kind, err := s.mapper().KindFor(gvr); err == nil {
		w.Kind = kind.Kind
		if (w.Verb == VerbCreate || w.Verb == VerbApply) && w.Subresource == "" && w.Namespace == "" && w.Name != "" {
			s.claimCreated(ctx, t.w.caseNS, kind, w.Name, sent.owners)
		}
	}
	w.scope = s.rec.scopes.of(w.Kind, w.Namespace, w.Name)
	if t.w.fence != nil {
		if p := t.w.fence.Load(); p != nil {
			w.Time, w.Err, w.Point = time.Now(), fmt.Errorf("suite: manager %s was stopped by point %s; a stopped process writes nothing", t.w.manager, p), p.String()
			s.rec.addWrite(w)
			return nil, w.Err
		}
	}
	// A gated manager's Runnable has no request for the gate to refuse: its writes are, unless their object
	// belongs to an admitted Case.
	if runnable != "" && !t.w.ungated && !s.gate.admitted(w.scope) {
		w.Time, w.Err = time.Now(), apierrors.NewForbidden(gvr.GroupResource(), w.Name,
			fmt.Errorf("suite: the gate refused runnable %s of manager %s: %s belongs to no admitted case", runnable, t.w.manager, key(w.Namespace, w.Name)))
		s.rec.addWrite(w)
		return statusResponse(req, w.Err), nil
	}
	f := s.perturbBefore(&w, gvr.GroupResource())
	if f.err != nil {
		w.Time, w.Err = time.Now(), f.err
		s.rec.addWrite(w)
		return statusResponse(req, f.err), nil
	}
	resp, err := t.next.RoundTrip(req)
	w.Time = time.Now()
	if err != nil {
		w.Err = err
		s.rec.addWrite(w)
		return resp, err
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	if err != nil {
		w.Err = err
		s.rec.addWrite(w)
		return resp, nil
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		w.Err = s.decodeStatus(answer, resp)
	} else {
		got := s.decodeMeta(answer, resp.Header.Get("Content-Type"))
		if got.uid != "" {
			w.UID = got.uid
		}
		if w.Name == "" && w.Verb == VerbCreate {
			w.Name = got.name
		}
		if keepsResourceVersion(w.Verb, w.Subresource, got.marked) {
			w.ResourceVersion = got.rv
		}
	}
	s.rec.addWrite(w)
	s.perturbAfter(w, f)
	return resp, nil
}

// keepsResourceVersion says whether the resourceVersion of a write's answer is the one the write made (or,
// for a write that changed nothing, found). A subresource create (pods/binding, pods/eviction) answers with a
// Status or another object. A delete that removed the object answers with it as it was, and a delete of
// several with a list; one that left it marked for deletion (marked: a deletionTimestamp, held by finalizers
// or a grace period) answers with the object at the mark's resourceVersion, so the mark is the deleter's
// change (an update that then removes the last finalizer answers with that same resourceVersion).
func keepsResourceVersion(v Verb, subresource string, marked bool) bool {
	switch v {
	case VerbDelete:
		return marked
	case VerbDeleteAllOf:
		return false
	case VerbCreate:
		return subresource == ""
	}
	return true
}

// verbOf maps a request's verb to the recorded Verb; a patch of type application/apply-patch+yaml is a
// server-side apply.
func verbOf(verb, contentType string) Verb {
	switch verb {
	case "create":
		return VerbCreate
	case "update":
		return VerbUpdate
	case "patch":
		if strings.HasPrefix(contentType, "application/apply-patch") {
			return VerbApply
		}
		return VerbPatch
	case "delete":
		return VerbDelete
	}
	return VerbDeleteAllOf
}

// mapper is the REST mapper the transports find kinds with: the administrator client's (discovery, cached).
func (s *Suite) mapper() meta.RESTMapper { return s.Client.RESTMapper() }

// sentMeta is what a request or response body says of its object.
type sentMeta struct {
	name, rv string
	uid      types.UID
	owners   []metaOwner
	// marked is true when the object has a deletionTimestamp: a delete's answer is then the object left
	// marked for deletion (finalizers or a grace period hold it), at the resourceVersion of the mark.
	marked bool
}

// decodeMeta reads the object metadata of a JSON, YAML or protobuf body (a Status's details for a delete
// that answers with one); zero when the body holds none.
func (s *Suite) decodeMeta(body []byte, contentType string) sentMeta {
	if len(body) == 0 {
		return sentMeta{}
	}
	var accessor metav1.Object
	if strings.Contains(contentType, "protobuf") {
		obj, _, err := s.codecs().UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			return sentMeta{}
		}
		if st, ok := obj.(*metav1.Status); ok && st.Details != nil {
			return sentMeta{name: st.Details.Name, uid: st.Details.UID}
		}
		if accessor, err = meta.Accessor(obj); err != nil {
			return sentMeta{}
		}
	} else {
		// Only the fields sentMeta keeps are decoded: a response's managedFields and the rest of the object
		// are skipped. A JSON body (what clients send, server-side apply's apply-patch+yaml included) is read
		// directly, not through YAML's conversion, which was a tenth of the test process's CPU under -race.
		var m bodyMeta
		unmarshal := json.Unmarshal
		if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
			unmarshal = func(b []byte, v any) error { return yaml.Unmarshal(b, v) }
		}
		if err := unmarshal(body, &m); err != nil {
			return sentMeta{}
		}
		if m.Kind == "Status" && m.Details != nil {
			return sentMeta{name: m.Details.Name, uid: m.Details.UID}
		}
		out := sentMeta{name: m.Metadata.Name, rv: m.Metadata.ResourceVersion, uid: m.Metadata.UID, marked: m.Metadata.DeletionTimestamp != nil}
		for _, r := range m.Metadata.OwnerReferences {
			out.owners = append(out.owners, metaOwner{Kind: r.Kind, Name: r.Name, UID: r.UID})
		}
		return out
	}
	out := sentMeta{name: accessor.GetName(), rv: accessor.GetResourceVersion(), uid: accessor.GetUID(), marked: accessor.GetDeletionTimestamp() != nil}
	for _, r := range accessor.GetOwnerReferences() {
		out.owners = append(out.owners, metaOwner{Kind: r.Kind, Name: r.Name, UID: r.UID})
	}
	return out
}

// bodyMeta is the part of a JSON or YAML body decodeMeta reads: the kind, the metadata sentMeta keeps and a
// Status's details.
type bodyMeta struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name              string       `json:"name"`
		ResourceVersion   string       `json:"resourceVersion"`
		UID               types.UID    `json:"uid"`
		DeletionTimestamp *metav1.Time `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind string    `json:"kind"`
			Name string    `json:"name"`
			UID  types.UID `json:"uid"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Details *metav1.StatusDetails `json:"details"`
}

// decodeStatus turns a refused request's answer into the error a client would return for it.
func (s *Suite) decodeStatus(body []byte, resp *http.Response) error {
	var st metav1.Status
	if strings.Contains(resp.Header.Get("Content-Type"), "protobuf") {
		if obj, _, err := s.codecs().UniversalDeserializer().Decode(body, nil, nil); err == nil {
			if p, ok := obj.(*metav1.Status); ok {
				st = *p
			}
		}
	} else {
		_ = json.Unmarshal(body, &st)
	}
	if st.Status == metav1.StatusFailure {
		return &apierrors.StatusError{ErrStatus: st}
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, resp.Request.Method, schema.GroupResource{}, "", string(body), 0, false)
}

// codecs decodes protobuf and JSON bodies of the suite's kinds (made once).
func (s *Suite) codecs() serializer.CodecFactory {
	s.codecsOnce.Do(func() {
		scheme := s.scheme
		if scheme == nil {
			scheme = runtime.NewScheme()
		}
		s.codecFactory = serializer.NewCodecFactory(scheme)
	})
	return s.codecFactory
}

// statusResponse is the API server's answer to req carrying err (a point's injected error), as JSON. It
// carries no Retry-After header, so client-go hands the error to the caller instead of retrying.
func statusResponse(req *http.Request, err error) *http.Response {
	st := apierrors.APIStatus(nil)
	if !errors.As(err, &st) {
		st = apierrors.NewInternalError(err)
	}
	status := st.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	b, _ := json.Marshal(status)
	return &http.Response{StatusCode: int(status.Code), Status: fmt.Sprintf("%d %s", status.Code, http.StatusText(int(status.Code))),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req, ContentLength: int64(len(b)),
		Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(bytes.NewReader(b))}
}

// noteRead sends a get or list and notes it in the suite's readLog when a reconcile pass or a Runnable made
// it (an uncached read of the manager's client, its API reader, a clientset): the informers' own lists,
// made on no such context, feed the cache and decide nothing.
func (t *recordingTransport) noteRead(req *http.Request, info *request.RequestInfo) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	ctx := req.Context()
	if t.w.caseNS != "" || passFrom(ctx) == nil && runnableFrom(ctx) == "" {
		return resp, err
	}
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	if kind, kerr := t.s.mapper().KindFor(gvr); kerr == nil && info.Subresource == "" {
		t.s.reads.add(ctx, t.w.manager, kind.Kind, info.Namespace, info.Name)
	}
	return resp, err
}
