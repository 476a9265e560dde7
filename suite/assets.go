package suite

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ensembletest/ensemble/internal/controlplane"
)

// KubernetesVersion and EtcdVersion are the control-plane versions ensemble builds and expects
// (tools/envtest/build.sh builds the same ones).
const (
	KubernetesVersion = controlplane.KubernetesVersion
	EtcdVersion       = controlplane.EtcdVersion
)

// AssetsDir returns the directory holding the kube-apiserver and etcd binaries: $KUBEBUILDER_ASSETS when
// set, else setup-envtest's own layout, $XDG_DATA_HOME/kubebuilder-envtest/k8s/<version>-linux-amd64
// ($XDG_DATA_HOME defaults to ~/.local/share), the directory tools/envtest/build.sh fills. Error: either
// binary missing, in one line that names `make envtest-assets`.
func AssetsDir() (string, error) { return controlplane.AssetsDir() }

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
