package suite

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// resolveCRDPaths makes each path absolute and checks that it exists and holds at least one YAML or JSON
// file. Error: one line naming the path, the working directory and what to pass instead.
func resolveCRDPaths(paths []string) ([]string, error) {
	wd, _ := os.Getwd()
	var out []string
	for _, p := range paths {
		abs := p
		if !filepath.IsAbs(p) {
			abs = filepath.Join(wd, p)
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("suite: CRD path %q does not exist (resolved to %s from %s): pass the directory that holds the generated CRD YAML (run `make generate` if it is missing)", p, abs, wd)
		}
		if fi.IsDir() {
			var found []string
			for _, pat := range []string{"*.yaml", "*.yml", "*.json"} {
				m, _ := filepath.Glob(filepath.Join(abs, pat))
				found = append(found, m...)
			}
			if len(found) == 0 {
				return nil, fmt.Errorf("suite: CRD path %q (%s) holds no .yaml, .yml or .json file: pass the directory that holds the generated CRD YAML (run `make generate`)", p, abs)
			}
		}
		out = append(out, abs)
	}
	return out, nil
}
