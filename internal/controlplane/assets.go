// Package controlplane starts and stops the envtest control plane (kube-apiserver and etcd) so that no
// process outlives its test binary: it resolves the binaries built by tools/envtest, records the processes it
// started, stops them on SIGINT and SIGTERM, and kills those left by a test binary that was killed outright.
// suite uses it, and so do the TestMains of packages that run envtest without the harness.
package controlplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
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

// checked remembers the binaries CheckVersions accepted in this process, by path and modification time.
var checked sync.Map

// binaryPath is the path envtest runs binary name from, by envtest's own precedence: $TEST_ASSET_<NAME>,
// then $KUBEBUILDER_ASSETS, then dir.
func binaryPath(name, dir string) string {
	if v, ok := os.LookupEnv("TEST_ASSET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); ok {
		return v
	}
	if v, ok := os.LookupEnv("KUBEBUILDER_ASSETS"); ok {
		return filepath.Join(v, name)
	}
	return filepath.Join(dir, name)
}

// CheckVersions checks that the kube-apiserver and etcd envtest will run (from dir, unless
// $KUBEBUILDER_ASSETS or $TEST_ASSET_<NAME> point elsewhere, as envtest lets them) answer --version with
// KubernetesVersion and EtcdVersion (within 10 s each), so a stale or foreign binary is refused before it
// starts. Error: one line that names the binary, what it answered and `make envtest-assets`.
func CheckVersions(dir string) error {
	for bin, want := range map[string]string{"kube-apiserver": "Kubernetes v" + KubernetesVersion, "etcd": "etcd Version: " + EtcdVersion} {
		if err := checkVersion(binaryPath(bin, dir), want); err != nil {
			return err
		}
	}
	return nil
}

// checkVersion checks that the binary at path answers --version with the line want (within 10 s),
// remembering a binary it accepted. Error: one line naming it, its answer and `make envtest-assets`.
func checkVersion(path, want string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("ensemble: envtest binary %s not found: run `make envtest-assets`", path)
	}
	key := fmt.Sprint(path, fi.ModTime().UnixNano())
	if _, ok := checked.Load(key); ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	cancel()
	answer := strings.TrimSpace(string(out))
	if err != nil || !slices.Contains(strings.Split(answer, "\n"), want) {
		if err != nil {
			answer = fmt.Sprintf("%q (%v)", firstLine(answer), err)
		} else {
			answer = fmt.Sprintf("%q", firstLine(answer))
		}
		return fmt.Errorf("ensemble: %s answers --version with %s, not %q: rebuild the binaries with `make envtest-assets` (or point KUBEBUILDER_ASSETS at v%s ones)", path, answer, want, KubernetesVersion)
	}
	checked.Store(key, true)
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
