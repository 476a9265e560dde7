// Package controlplane starts and stops the envtest control plane (kube-apiserver and etcd) so that no
// process outlives its test binary: it resolves the binaries built by tools/envtest, records the processes it
// started, stops them on SIGINT and SIGTERM, and kills those left by a test binary that was killed outright.
// suite uses it, and so do the TestMains of packages that run envtest without the harness.
package controlplane

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
	fromEnv := dir != ""
	if dir == "" {
		data := os.Getenv("XDG_DATA_HOME")
		if data == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("ensemble: cannot locate envtest binaries: no home directory (%v): set KUBEBUILDER_ASSETS or run `make envtest-assets`", err)
			}
			data = filepath.Join(home, ".local", "share")
		}
		dir = filepath.Join(data, "kubebuilder-envtest", "k8s", KubernetesVersion+"-linux-amd64")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || fi.IsDir() {
			if fromEnv {
				return "", fmt.Errorf("ensemble: envtest binary %s not found in KUBEBUILDER_ASSETS=%s: point KUBEBUILDER_ASSETS at kube-apiserver v%s and etcd v%s, or unset it and run `make envtest-assets`", bin, dir, KubernetesVersion, EtcdVersion)
			}
			return "", fmt.Errorf("ensemble: envtest binary %s not found in %s: run `make envtest-assets` to build kube-apiserver v%s and etcd v%s there", bin, dir, KubernetesVersion, EtcdVersion)
		}
	}
	return dir, nil
}
