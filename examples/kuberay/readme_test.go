package kuberay_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ensembletest/ensemble/suite"
)

// TestReadmeShowsTheseFiles: every Go block of the repository README's "Writing a scenario" section is
// taken from this example as it is, so the README's way of writing a scenario is one that compiles and runs;
// the Pins section's block is taken from the scenario suite.
func TestReadmeShowsTheseFiles(t *testing.T) {
	// The repository's root, where this module's replace points, from here or from a version's directory.
	root, err := suite.ModuleDir("github.com/ensembletest/ensemble")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	if i := strings.Index(section, "## Writing a scenario"); i >= 0 {
		section = section[i:]
	} else {
		t.Fatal(`README.md has no "## Writing a scenario" section`)
	}
	if i := strings.Index(section[3:], "\n## "); i >= 0 {
		section = section[:i+3]
	}
	for heading, file := range map[string]string{"## Pins": "multigres_test.go", "## Perturbation": "prune_test.go"} {
		part := string(readme)[strings.Index(string(readme), heading):]
		if i := strings.Index(part[3:], "\n## "); i >= 0 {
			part = part[:i+3]
		}
		scenario, err := os.ReadFile(filepath.Join(root, "scenarios", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(part, -1) {
			if !strings.Contains(string(scenario), b[1]) {
				t.Errorf("README's %s block is not in scenarios/%s as it is; update one or the other:\n%s", heading, file, b[1])
			}
		}
	}
	var sources strings.Builder
	for _, f := range []string{"suite_test.go", "kuberay_specs_test.go", "kuberay.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources.Write(b)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) == 0 {
		t.Fatal("the README's Writing a scenario section shows no Go block")
	}
	for _, b := range blocks {
		if !strings.Contains(sources.String(), b[1]) {
			t.Errorf("this README block is not in examples/kuberay as it is; update one or the other:\n%s", b[1])
		}
	}
}
