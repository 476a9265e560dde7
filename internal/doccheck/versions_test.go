package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An example's other version (examples/<example>/<version>/, a module of its own) has one spec source: each
// .go file of the example is a symbolic link there to the example's (ln -s ../<file> <version>/), except
// the files named wiring_*, each version's own, and the version holds no file of its own besides those.
// docs/architecture.md §10 describes the layout.
func TestExampleVersionsLinkEveryFile(t *testing.T) {
	mods, err := filepath.Glob(filepath.Join(root, "examples", "*", "v*", "go.mod"))
	if err != nil || len(mods) == 0 {
		t.Fatalf("no example version (examples/*/v*/go.mod): %v", err)
	}
	for _, mod := range mods {
		dir := filepath.Dir(mod)
		example := filepath.Dir(dir)
		rel, _ := filepath.Rel(root, dir)
		shared, _ := filepath.Glob(filepath.Join(example, "*.go"))
		for _, f := range shared {
			name := filepath.Base(f)
			if strings.HasPrefix(name, "wiring_") {
				continue
			}
			if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != "../"+name {
				t.Errorf("%s/%s is not a link to ../%s (cd %s && ln -s ../%s .): %v", rel, name, name, rel, name, err)
			}
		}
		own, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range own {
			fi, err := os.Lstat(f)
			if err != nil {
				t.Fatal(err)
			}
			name := filepath.Base(f)
			if fi.Mode()&os.ModeSymlink == 0 && !strings.HasPrefix(name, "wiring_") {
				t.Errorf("%s/%s is a file of its own, not a link to the example's: the specs would have two sources (name a version's own file wiring_*)", rel, name)
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				if _, err := os.Stat(f); err != nil {
					t.Errorf("%s/%s links to nothing (its file was removed or renamed in %s): %v", rel, name, filepath.Base(example), err)
				}
			}
		}
	}
}
