package suite

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPinEvidenceInTheDefaultDirectoryIsRemovedAtStop checks that a pin's evidence written to an artifacts
// directory nobody asked for is gone after removeEvidence (Stop's last step), with the directories it
// leaves empty, while a failure dump beside it and evidence in a directory that was asked for stay.
func TestPinEvidenceInTheDefaultDirectoryIsRemovedAtStop(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ensemble-artifacts")
	s := &Suite{artifactsDir: root}
	pin := (&Case{Namespace: "e-pin", s: s, t: t}).writeEvidence("X-1", "the whole evidence")
	dumped := &Case{Namespace: "e-dumped", s: s, t: t}
	dump := filepath.Join(dumped.ArtifactsDir(), "objects.yaml")
	if pin == "" {
		t.Fatal("writeEvidence wrote nothing")
	}
	beside := dumped.writeEvidence("X-2", "evidence beside a dump")
	if err := os.WriteFile(dump, []byte("kind: List\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.removeEvidence()
	for _, gone := range []string{pin, filepath.Dir(pin), beside} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s is still there after Stop (err %v)", gone, err)
		}
	}
	if _, err := os.Stat(dump); err != nil {
		t.Errorf("the failure dump beside the evidence went too: %v", err)
	}

	asked := &Suite{artifactsDir: t.TempDir(), evidenceAsked: true}
	kept := (&Case{Namespace: "e-asked", s: asked, t: t}).writeEvidence("X-3", "asked for")
	asked.removeEvidence()
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("evidence in an artifacts directory that was asked for was removed: %v", err)
	}
}
