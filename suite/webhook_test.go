package suite

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestUnservedWebhooks: Boot refuses a configured webhook, or a CRD's conversion, that the serving manager
// does not answer, naming each; before, every write the webhook matched would have failed at run time.
func TestUnservedWebhooks(t *testing.T) {
	h := &webhooks{names: map[string][]string{"/mutate": {"m.example.com"}, "/validate": {"v.example.com"}},
		conversion: []string{"gadgets.example.com"}}
	got := strings.Join(h.unserved(), "; ")
	if want := "webhook m.example.com at /mutate; webhook v.example.com at /validate; the conversion webhook of CRD gadgets.example.com at /convert"; got != want {
		t.Errorf("with no manager serving: got %q, want %q", got, want)
	}
	h.claim(&webhookServer{manager: "op", paths: []string{"mutate", "/convert"}})
	if got := strings.Join(h.unserved(), "; "); got != "webhook v.example.com at /validate" {
		t.Errorf("with op serving /mutate and /convert: got %q", got)
	}
	h.claim(&webhookServer{manager: "other", paths: []string{"/validate"}})
	if h.serving != "op" {
		t.Errorf("a second manager took serving from op: %q", h.serving)
	}
	h.release("op")
	if h.serving != "" {
		t.Errorf("release left %q serving", h.serving)
	}
}

// TestReadWebhooksRefusesBadPaths: a path that does not exist, one that holds no webhook configuration and
// a configuration of another API version each give one line naming the path or file.
func TestReadWebhooksRefusesBadPaths(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.yaml")
	old := filepath.Join(dir, "old.yaml")
	if err := os.WriteFile(other, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("apiVersion: admissionregistration.k8s.io/v1beta1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "missing"): "does not exist",
		other:                         "holds no MutatingWebhookConfiguration or ValidatingWebhookConfiguration",
		old:                           "only admissionregistration.k8s.io/v1 is installed",
	} {
		_, err := readWebhooks(WebhookOptions{Paths: []string{path}})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line naming it and %q", path, err, want)
		}
	}
	h, err := readWebhooks(WebhookOptions{Paths: []string{"testdata/webhooks"}})
	if err != nil || len(h.mutating) != 1 || len(h.validating) != 0 {
		t.Errorf("testdata/webhooks: got %v, %+v; want its one mutating configuration (the CRD beside it skipped)", err, h)
	}
}

// TestWebhookHintLeavesOtherErrors: an error that names no webhook is returned as it is.
func TestWebhookHintLeavesOtherErrors(t *testing.T) {
	s := &Suite{hooks: &webhooks{}}
	err := errors.New("configmaps \"x\" already exists")
	if got := s.webhookHint(err); got != err {
		t.Errorf("got %v, want the error unchanged", got)
	}
}

// TestRecordConversion: a ConversionReview of a list is recorded as one VerbConvert write per object, in its
// Case's namespace, and a failed review as writes whose Err is the failure; none moves the namespace's
// latest write (quiescence) or counts among its writers.
func TestRecordConversion(t *testing.T) {
	s := &Suite{rec: newRecorder(newScheme(), newBroadcast(), newScopes()),
		hooks: &webhooks{names: map[string][]string{}, conversion: []string{"gadgets.example.com"},
			crds: map[schema.GroupKind]string{{Group: "example.com", Kind: "Gadget"}: "gadgets.example.com"}}}
	answer := func(status, msg string) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			review := &apiextensionsv1.ConversionReview{}
			if err := json.NewDecoder(r.Body).Decode(review); err != nil {
				t.Fatal(err)
			}
			review.Response = &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: status, Message: msg}}
			review.Request = nil
			_ = json.NewEncoder(rw).Encode(review)
		})
	}
	gadget := func(name string) string {
		return `{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"namespace":"ns","name":"` + name + `","uid":"uid-` + name + `"}}`
	}
	review := func(objs ...string) *http.Request {
		body := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"r","desiredAPIVersion":"example.com/v2","objects":[` + strings.Join(objs, ",") + `]}}`
		return httptest.NewRequest(http.MethodPost, "/convert", strings.NewReader(body))
	}
	s.recordingHandler("op", "convert", answer(metav1.StatusSuccess, "")).ServeHTTP(httptest.NewRecorder(), review(gadget("a"), gadget("b")))
	s.recordingHandler("op", "/convert", answer(metav1.StatusFailure, "colour unknown")).ServeHTTP(httptest.NewRecorder(), review(gadget("c")))

	var got []string
	for _, w := range s.rec.writes("ns", WriteFilter{Verb: VerbConvert, IncludeRejected: true}) {
		got = append(got, fmt.Sprintf("%s %s %s", w.UID, strings.SplitN(w.line(), " ", 3)[2], w.Conversion.To))
	}
	want := []string{
		"uid-a op/gadgets.example.com convert Gadget/ns/a example.com/v1 -> v2 at /convert example.com/v2",
		"uid-b op/gadgets.example.com convert Gadget/ns/b example.com/v1 -> v2 at /convert example.com/v2",
		"uid-c op/gadgets.example.com convert Gadget/ns/c example.com/v1 -> v2 at /convert FAILED: conversion webhook failed the conversion to example.com/v2: colour unknown example.com/v2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recorded conversions (-want +got):\n%s", diff)
	}
	if last := s.rec.lastWrite("ns"); !last.IsZero() {
		t.Errorf("the conversions moved the namespace's latest write to %s: quiescence would wait on reads", last)
	}
	if w := s.rec.writers("ns", time.Time{}); len(w) > 0 {
		t.Errorf("the conversions count among the namespace's writers: %v", w)
	}
}
