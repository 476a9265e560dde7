package suitebin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDirWantsATestFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Dir(dir); err == nil || !strings.Contains(err.Error(), "has no _test.go file: name the Ginkgo suite's package directory") {
		t.Errorf("Dir of a directory without tests: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(dir))
	if got, err := Dir(filepath.Base(dir)); err != nil || got != dir {
		t.Errorf("Dir(%s) = %q, %v, want %q", filepath.Base(dir), got, err, dir)
	}
}

// Without KUBEBUILDER_ASSETS and without the binaries in setup-envtest's layout, the line says both ways.
func TestAssetsSaysWhereAndHow(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	_, err := Assets()
	if err == nil || !strings.Contains(err.Error(), "not found in ") || !strings.Contains(err.Error(), "or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("Assets = %v", err)
	}
}

func TestTail(t *testing.T) {
	if got := Tail("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail("a", 5); got != "a" {
		t.Errorf("Tail = %q", got)
	}
}
