package suite

import (
	"fmt"
	"os"
	"path/filepath"
)

// KubernetesVersion and EtcdVersion are the control-plane versions ensemble builds and expects
// (tools/envtest/build.sh builds the same ones).
const (
	KubernetesVersion = "1.37.2"
	EtcdVersion       = "3.6.16"
)

// AssetsDir returns the directory holding the kube-apiserver and etcd binaries, resolved the way
// tools/envtest/build.sh resolves it: $KUBEBUILDER_ASSETS when set, else setup-envtest's own layout,
// $XDG_DATA_HOME/kubebuilder-envtest/k8s/<version>-linux-amd64 ($XDG_DATA_HOME defaults to
// ~/.local/share). Error: either binary missing, with the command that builds them.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	from := "KUBEBUILDER_ASSETS"
	if dir == "" {
		data := os.Getenv("XDG_DATA_HOME")
		if data == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("suite: cannot locate envtest binaries: no home directory (%v): set KUBEBUILDER_ASSETS or run `make envtest-assets`", err)
			}
			data = filepath.Join(home, ".local", "share")
		}
		dir = filepath.Join(data, "kubebuilder-envtest", "k8s", KubernetesVersion+"-linux-amd64")
		from = "setup-envtest's default directory"
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || fi.IsDir() {
			return "", fmt.Errorf("suite: envtest binary %s not found in %s (%s): run `make envtest-assets` to build kube-apiserver v%s and etcd v%s there", bin, dir, from, KubernetesVersion, EtcdVersion)
		}
	}
	return dir, nil
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
