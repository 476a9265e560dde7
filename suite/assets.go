package suite

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// ModuleDir returns the directory of the Go module modulePath as the build of the calling package sees it
// (`go list -m`): the way to reach a dependency's CRDs, for instance
// filepath.Join(dir, "config/crd/bases") for an operator imported from its module. Errors: the go command
// is missing, or modulePath is not a dependency of the main module (add it with `go get`).
func ModuleDir(modulePath string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", modulePath)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("suite: ModuleDir(%q): %s: require the module in go.mod (go get %s) and download it (go mod download)",
			modulePath, strings.TrimSpace(firstNonEmpty(stderr.String(), fmt.Sprint(err), "no directory")), modulePath)
	}
	return dir, nil
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" && s != "<nil>" {
			return s
		}
	}
	return ""
}

// resolveCRDPaths makes each path absolute and checks what it holds: every .yaml, .yml or .json file must
// parse, and each path must hold at least one CustomResourceDefinition. Error: one line naming the path (and
// the file and line for a parse error), the working directory where it matters, and what to do.
func resolveCRDPaths(paths []string) ([]string, error) {
	wd, _ := os.Getwd()
	var out []string
	for _, p := range paths {
		abs, files, err := manifestFiles(wd, p)
		if err != nil {
			return nil, fmt.Errorf("suite: CRD path %q does not exist (resolved to %s from %s): pass the directory that holds the generated CRD YAML (run `make generate` if it is missing)", p, abs, wd)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("suite: CRD path %q (%s) holds no .yaml, .yml or .json file: pass the directory that holds the generated CRD YAML (run `make generate`)", p, abs)
		}
		crds := 0
		for _, f := range files {
			n, err := countCRDs(f)
			if err != nil {
				return nil, fmt.Errorf("suite: CRD file %s: %v: fix the YAML (or regenerate it with `make generate`)", f, err)
			}
			crds += n
		}
		if crds == 0 {
			hint := ""
			if sub, _ := filepath.Glob(filepath.Join(abs, "*", "*.yaml")); len(sub) > 0 {
				hint = fmt.Sprintf(" (subdirectories are not searched: %s holds YAML, pass that directory)", filepath.Dir(sub[0]))
			}
			return nil, fmt.Errorf("suite: CRD path %q (%s) holds no CustomResourceDefinition%s: pass the directory that holds the generated CRD YAML (run `make generate`)", p, abs, hint)
		}
		out = append(out, abs)
	}
	return out, nil
}

// validateCRDs checks the CRDs given as objects. Errors: a nil entry, one with no metadata.name, two of one
// name.
func validateCRDs(crds []*apiextensionsv1.CustomResourceDefinition) error {
	seen := map[string]int{}
	for i, c := range crds {
		if c == nil {
			return fmt.Errorf("suite: Options.CRDs[%d] is nil: leave it out or pass the CRD", i)
		}
		if c.Name == "" {
			return fmt.Errorf("suite: Options.CRDs[%d] has no metadata.name: name it <plural>.<group>, as the API server requires", i)
		}
		if j, dup := seen[c.Name]; dup {
			return fmt.Errorf("suite: Options.CRDs[%d] and [%d] are both named %q: pass each CRD once", j, i, c.Name)
		}
		seen[c.Name] = i
	}
	return nil
}

// manifestFiles resolves path against the working directory wd and lists the manifests it names: itself
// when it is a file, else the .yaml, .yml and .json files directly in it (subdirectories are not searched).
// Error: the path does not exist (abs is still returned, for the message).
func manifestFiles(wd, path string) (abs string, files []string, err error) {
	abs = path
	if !filepath.IsAbs(path) {
		abs = filepath.Join(wd, path)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return abs, nil, err
	}
	if !fi.IsDir() {
		return abs, []string{abs}, nil
	}
	for _, pat := range []string{"*.yaml", "*.yml", "*.json"} {
		m, _ := filepath.Glob(filepath.Join(abs, pat))
		files = append(files, m...)
	}
	return abs, files, nil
}

// countCRDs parses every YAML document of file and counts those of kind CustomResourceDefinition. Errors:
// a document that is not valid YAML, with the line of the file where the parser stopped.
func countCRDs(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	n, start, doc := 0, 1, 0
	for _, text := range docSeparator.Split(string(b), -1) {
		lines := strings.Count(text, "\n") + 1
		if strings.TrimSpace(text) == "" {
			start += lines
			continue // before a leading ---, or between two: not a document
		}
		doc++
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(text), &meta); err != nil {
			msg := err.Error()
			if m := yamlLine.FindStringSubmatch(msg); m != nil {
				line, _ := strconv.Atoi(m[1])
				msg = strings.Replace(msg, m[0], fmt.Sprintf("line %d", start+line-1), 1)
			}
			return 0, fmt.Errorf("document %d: %s", doc, msg)
		}
		if meta.Kind == "CustomResourceDefinition" {
			n++
		}
		start += lines
	}
	return n, nil
}

var (
	docSeparator = regexp.MustCompile(`(?m)^---[ \t]*\n`)
	yamlLine     = regexp.MustCompile(`line (\d+)`)
)
