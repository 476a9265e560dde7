package suite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
