package controlplane

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBinaries writes a kube-apiserver, a kube-controller-manager and an etcd into a new directory that
// answer --version with the given versions, etcd followed by 200 KB more output: enough that a reader which
// stops at the first matching line leaves the writer to die of SIGPIPE. A binary whose version is "" is
// not written.
func fakeBinaries(t *testing.T, kube, kcm, etcd string) string {
	t.Helper()
	dir := t.TempDir()
	scripts := map[string]string{
		"kube-apiserver":          "#!/usr/bin/env bash\necho 'Kubernetes v" + kube + "'\n",
		"kube-controller-manager": "#!/usr/bin/env bash\necho 'Kubernetes v" + kcm + "'\n",
		"etcd":                    "#!/usr/bin/env bash\necho 'etcd Version: " + etcd + "'\necho 'Git SHA: 0'\nyes 'Go Version: go1.26' | head -c 200000\n",
	}
	versions := map[string]string{"kube-apiserver": kube, "kube-controller-manager": kcm, "etcd": etcd}
	for name, body := range scripts {
		if versions[name] == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runBuildScript(t *testing.T, assets string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "../../tools/envtest/build.sh")
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The version check once failed 12 times in 300 on a loaded machine: `etcd --version | grep -q` under
// pipefail fails whenever grep exits before etcd has finished writing. With long output it failed every time.
func TestBuildScriptVersionCheckIgnoresLongOutput(t *testing.T) {
	dir := fakeBinaries(t, KubernetesVersion, KubernetesVersion, EtcdVersion)
	for i := 0; i < 20; i++ {
		out, err := runBuildScript(t, dir)
		if err != nil {
			t.Fatalf("run %d: build.sh refused binaries of the right versions: %v\n%s", i+1, err, out)
		}
		if !strings.Contains(out, "nothing to build") {
			t.Fatalf("run %d: build.sh did not accept the binaries: %s", i+1, out)
		}
	}
}

func TestBuildScriptRefusesWrongVersions(t *testing.T) {
	want := "does not hold kube-apiserver v" + KubernetesVersion + ", kube-controller-manager v" + KubernetesVersion +
		" and etcd v" + EtcdVersion
	for name, dir := range map[string]string{
		"kube-apiserver":                  fakeBinaries(t, "1.36.0", KubernetesVersion, EtcdVersion),
		"kube-controller-manager":         fakeBinaries(t, KubernetesVersion, "1.36.0", EtcdVersion),
		"etcd":                            fakeBinaries(t, KubernetesVersion, KubernetesVersion, "3.5.0"),
		"missing kube-controller-manager": fakeBinaries(t, KubernetesVersion, "", EtcdVersion),
	} {
		out, err := runBuildScript(t, dir)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("%s: build.sh accepted the binaries or named the wrong ones (err %v): %s", name, err, out)
		}
	}
}
