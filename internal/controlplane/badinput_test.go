package controlplane

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// hangSource is a stand-in for a control-plane binary that answers --version right, then binds the port it
// is given (so no other process can take it) and accepts connections without ever answering: it started,
// but it never serves.
const hangSource = `package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		switch filepath.Base(os.Args[0]) {
		case "etcd":
			fmt.Println("etcd Version: ` + EtcdVersion + `")
		default:
			fmt.Println("Kubernetes v` + KubernetesVersion + `")
		}
		return
	}
	for _, a := range os.Args[1:] {
		addr := ""
		if v, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
			if u, err := url.Parse(strings.Split(v, ",")[0]); err == nil {
				addr = u.Host
			}
		}
		if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
			addr = "127.0.0.1:" + v
		}
		if addr == "" {
			continue
		}
		if l, err := net.Listen("tcp", addr); err == nil {
			go func() {
				var held []net.Conn
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					held = append(held, c)
				}
			}()
		}
	}
	for {
		time.Sleep(time.Hour)
	}
}
`

// busySource is a stand-in for a control-plane binary on a machine loaded past its cores: it works (spins a
// core) for $ENSEMBLE_TEST_BUSY (a Go duration; "forever" never stops), then becomes the real binary of the
// same name in $ENSEMBLE_TEST_REAL_DIR with the same arguments. It answers --version as the real one at once.
const busySource = `package main

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "--version" {
		d, err := time.ParseDuration(os.Getenv("ENSEMBLE_TEST_BUSY"))
		for end := time.Now().Add(d); err != nil || time.Now().Before(end); {
		}
	}
	real := filepath.Join(os.Getenv("ENSEMBLE_TEST_REAL_DIR"), filepath.Base(os.Args[0]))
	panic(syscall.Exec(real, os.Args, os.Environ()))
}
`

// hangingAssets returns an assets directory where the named binaries are the hanging stand-in and the
// others are links to the real ones.
func hangingAssets(t *testing.T, hang ...string) string {
	t.Helper()
	return standInAssets(t, hangSource, hang...)
}

// standInAssets returns an assets directory where the named binaries are built from source and the others
// are links to the real ones.
func standInAssets(t *testing.T, source string, names ...string) string {
	t.Helper()
	real, err := AssetsDir()
	if err != nil {
		t.Skip(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module standin\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if contains := strings.Contains(strings.Join(names, " "), bin); contains {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, bin), ".")
			cmd.Dir = src
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("building the stand-in %s: %v\n%s", bin, err, out)
			}
			continue
		}
		if err := os.Symlink(filepath.Join(real, bin), filepath.Join(dir, bin)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestStartGivesUpOnAHungBinary: a binary that answers --version but never serves ends the start once its
// bound has passed, as idle (not at StartStretch times the bound, nor after envtest's 5 retries), with one
// line naming it, and leaves no process.

func TestStartGivesUpOnAHungBinary(t *testing.T) {
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		t.Run(bin, func(t *testing.T) {
			dir := hangingAssets(t, bin)
			t.Setenv("KUBEBUILDER_ASSETS", dir) // envtest prefers it to BinaryAssetsDirectory
			want := bin + " (" + filepath.Join(dir, bin) + ") did not come up within"
			start := time.Now()
			p, err := Start(&envtest.Environment{BinaryAssetsDirectory: dir, ControlPlaneStartTimeout: 3 * time.Second}, nil)
			took := time.Since(start)
			t.Logf("after %s: %v", took.Round(time.Millisecond), err)
			if p != nil {
				_ = p.Stop()
			}
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "was idle over its last") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Start = %v, want one line saying %s did not come up and was idle", err, bin)
			}
			if left := ChildControlPlanes(); len(left) != 0 {
				t.Fatalf("processes left: %v", left)
			}
		})
	}
}

// TestStartWaitsForABinaryThatIsStillWorking: a start that passes its bound while the binary it waits for
// keeps a core busy (a machine loaded past its cores) goes on and succeeds; one still working at
// StartStretch times the bound is given up with one line that says the machine is too loaded.
func TestStartWaitsForABinaryThatIsStillWorking(t *testing.T) {
	real, err := AssetsDir()
	if err != nil {
		t.Skip(err)
	}
	dir := standInAssets(t, busySource, "kube-apiserver")
	t.Setenv("KUBEBUILDER_ASSETS", dir) // envtest prefers it to BinaryAssetsDirectory
	t.Setenv("ENSEMBLE_TEST_REAL_DIR", real)
	t.Run("slow", func(t *testing.T) {
		t.Setenv("ENSEMBLE_TEST_BUSY", "17s")
		start := time.Now()
		p, err := Start(&envtest.Environment{BinaryAssetsDirectory: dir, ControlPlaneStartTimeout: 15 * time.Second}, nil)
		t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
		if err != nil {
			t.Fatalf("Start = %v, want a start that goes on past its 15 s bound while kube-apiserver works", err)
		}
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("too slow", func(t *testing.T) {
		t.Setenv("ENSEMBLE_TEST_BUSY", "forever")
		start := time.Now()
		p, err := Start(&envtest.Environment{BinaryAssetsDirectory: dir, ControlPlaneStartTimeout: 2 * time.Second}, nil)
		took := time.Since(start)
		t.Logf("after %s: %v", took.Round(time.Millisecond), err)
		if p != nil {
			_ = p.Stop()
		}
		want := "kube-apiserver (" + filepath.Join(dir, "kube-apiserver") + ") did not come up within 10s, 5 times the start bound 2s, though it was still working"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "run fewer test processes") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Start = %v, want one line saying %s", err, want)
		}
		if took < 10*time.Second {
			t.Errorf("Start gave up after %s, before 5 times its 2 s bound", took)
		}
	})
	if left := ChildControlPlanes(); len(left) != 0 {
		t.Fatalf("processes left: %v", left)
	}
}

func TestStartRefusesAWrongVersion(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"kube-apiserver": "#!/usr/bin/env bash\necho 'Kubernetes v1.30.0'\n",
		"etcd":           "#!/usr/bin/env bash\necho 'etcd Version: " + EtcdVersion + "'\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBEBUILDER_ASSETS", dir)
	_, err := Start(&envtest.Environment{}, nil)
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), `answers --version with "Kubernetes v1.30.0"`) || !strings.Contains(err.Error(), "make envtest-assets") {
		t.Fatalf("Start = %v, want the wrong version named", err)
	}
}

func TestStartRefusesAnUnwritableTempDir(t *testing.T) {
	if os.Getuid() == 0 {
		// root writes anywhere: point TMPDIR at a file instead of a read-only directory.
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("TMPDIR", f)
	} else {
		ro := t.TempDir()
		if err := os.Chmod(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Setenv("TMPDIR", ro)
	}
	real, err := AssetsDir()
	if err != nil {
		t.Skip(err)
	}
	_, err = Start(&envtest.Environment{BinaryAssetsDirectory: real}, nil)
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "point TMPDIR at a writable directory") || strings.Contains(err.Error(), "envtest-assets") {
		t.Fatalf("Start = %v, want the temp directory named", err)
	}
}

// TestTwoPlanesInOneProcess: stopping one control plane leaves another of the same process running.
func TestTwoPlanesInOneProcess(t *testing.T) {
	if _, err := AssetsDir(); err != nil {
		t.Skip(err)
	}
	a, err := Start(&envtest.Environment{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(&envtest.Environment{}, nil)
	if err != nil {
		_ = a.Stop()
		t.Fatal(err)
	}
	defer b.Stop()
	alive := func(p *Plane) (out []int) {
		for _, pid := range p.children() {
			if running(pid) {
				out = append(out, pid)
			}
		}
		return out
	}
	if len(alive(a)) != 2 || len(alive(b)) != 2 {
		t.Fatalf("planes' running processes: a %v, b %v; want kube-apiserver and etcd each", alive(a), alive(b))
	}
	runningA, runningB := alive(a), alive(b)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range runningB {
		if !running(pid) {
			t.Fatalf("stopping plane a killed plane b's process %d (%s)", pid, comm(pid))
		}
	}
	for _, pid := range runningA {
		if running(pid) {
			t.Fatalf("plane a's process %d outlived its Stop", pid)
		}
	}
}

// TestStartErrorSaysWhatToDo: envtest's start errors become one line whose advice fits the cause: a CRD the
// API server refused names the CRD to fix, CRDs not served in time name the bound and the option to raise,
// anything else points at the binaries.
func TestStartErrorSaysWhatToDo(t *testing.T) {
	p := &Plane{env: &envtest.Environment{BinaryAssetsDirectory: "/assets", CRDInstallOptions: envtest.CRDInstallOptions{MaxTime: time.Minute}}}
	for in, want := range map[string]string{
		"unable to install CRDs onto control plane: something went wrong waiting for CRDs to appear as API resources: context deadline exceeded": "did not serve them within 1m0s",
		`unable to install CRDs onto control plane: CustomResourceDefinition.apiextensions.k8s.io "widgets.x.io" is invalid`:                     "fix the CRD it names",
		"fork/exec /assets/etcd: permission denied": "rebuild them with `make envtest-assets`",
	} {
		got := p.startError(errors.New(in)).Error()
		if !strings.Contains(got, want) || !strings.Contains(got, in) {
			t.Errorf("startError(%q) = %q, want it to say %q and keep the cause", in, got, want)
		}
	}
}
