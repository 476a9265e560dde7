package controlplane

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// fakeGo is a go command that, like the real one, handles SIGINT even when started with it ignored (as a
// background job of a script is): it writes its pid and the unfinished output file named by -o, then waits
// for SIGINT, notes it and exits.
const fakeGo = `package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	marks := os.Getenv("FAKE_GO_MARKS")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	for i, a := range os.Args {
		if a == "-o" && i+1 < len(os.Args) {
			_ = os.WriteFile(os.Args[i+1], []byte("half"), 0o644)
		}
	}
	_ = os.WriteFile(filepath.Join(marks, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	select {
	case <-ch:
		_ = os.WriteFile(filepath.Join(marks, "sigint"), nil, 0o644)
		os.Exit(130)
	case <-time.After(time.Minute):
		os.Exit(1)
	}
}
`

// A SIGTERM to build.sh (make passes one on when it is stopped) interrupts the go build it is waiting for
// and removes the unfinished binary: a go killed outright kept compiling after make had gone and left its
// 2 GB work directory in the temp dir.
func TestBuildScriptStopsItsBuildOnSIGTERM(t *testing.T) {
	tmp := t.TempDir()
	bin, marks, data := filepath.Join(tmp, "bin"), filepath.Join(tmp, "marks"), filepath.Join(tmp, "data")
	for _, d := range []string{bin, marks, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(tmp, "fakego.go")
	if err := os.WriteFile(src, []byte(fakeGo), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "go"), src).CombinedOutput(); err != nil {
		t.Fatalf("building the fake go: %v\n%s", err, out)
	}
	cmd := exec.Command("bash", "../../tools/envtest/build.sh")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "XDG_DATA_HOME="+data, "FAKE_GO_MARKS="+marks, "KUBEBUILDER_ASSETS=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	pidFile := filepath.Join(marks, "pid")
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(pidFile); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("build.sh ended (%v) before its go build began:\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fake go did not start within a minute:\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 143 {
			t.Errorf("build.sh ended with %v after SIGTERM, want exit status 143", err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("build.sh did not end within a minute of SIGTERM:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(marks, "sigint")); err != nil {
		t.Errorf("the go build got no SIGINT from build.sh: %v", err)
	}
	b, _ := os.ReadFile(pidFile)
	if pid, err := strconv.Atoi(string(b)); err == nil && syscall.Kill(pid, 0) == nil {
		t.Errorf("the go build (pid %d) outlived build.sh", pid)
	}
	left, _ := filepath.Glob(filepath.Join(data, "kubebuilder-envtest", "k8s", "*", "*"))
	if len(left) > 0 {
		t.Errorf("build.sh left %v behind", left)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("build.sh did not say it was interrupted:\n%s", stderr.String())
	}
}
