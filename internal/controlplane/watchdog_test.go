package controlplane

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestWatchdogChild is the child of TestNothingOutlivesAPanic and TestNothingOutlivesASIGKILL: it starts a
// control plane (with kube-controller-manager when ENSEMBLE_WATCHDOG_CHILD is "sigkill"), prints its
// processes and its working directory, and then panics ("1") or waits to be killed ("sigkill") without
// stopping it.
func TestWatchdogChild(t *testing.T) {
	mode := os.Getenv("ENSEMBLE_WATCHDOG_CHILD")
	if mode != "1" && mode != "sigkill" {
		t.Skip("run by TestNothingOutlivesAPanic and TestNothingOutlivesASIGKILL")
	}
	p, err := Start(&envtest.Environment{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mode == "sigkill" {
		if err := p.StartKubeControllerManager(DefaultKubeControllers, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Printf("PIDS %v\n", strings.Trim(fmt.Sprint(p.children()), "[]"))
	fmt.Printf("DIR %s\n", p.dir)
	if mode == "sigkill" {
		fmt.Println("READY")
		<-t.Context().Done()
	}
	panic("a test panicked with its control plane running")
}

// TestNothingOutlivesAPanic: a test binary that panics (or is killed, or hits go test's -timeout) cannot
// stop its control plane; the watchdog kills it the moment the binary is gone.
func TestNothingOutlivesAPanic(t *testing.T) {
	if _, err := AssetsDir(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ENSEMBLE_WATCHDOG_CHILD=1")
	out, _ := cmd.CombinedOutput()
	exited := time.Now()
	var pids []int
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
		}
	}
	if len(pids) < 2 || !strings.Contains(string(out), "panic: a test panicked") {
		t.Fatalf("the child did not start a control plane and panic:\n%s", out)
	}
	waitGone(t, pids, exited)
}

// TestNothingOutlivesASIGKILL: a test binary killed outright with kube-apiserver, etcd and
// kube-controller-manager running leaves none of them, and nothing in its temp directory: etcd's data, the
// API server's keys and kube-controller-manager's kubeconfig are all in the plane's working directory, which
// the watchdog removes.
func TestNothingOutlivesASIGKILL(t *testing.T) {
	if _, err := AssetsDir(); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "ENSEMBLE_WATCHDOG_CHILD=sigkill", "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	var dir string
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "READY" {
		lines = append(lines, sc.Text())
		if rest, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		if rest, ok := strings.CutPrefix(sc.Text(), "DIR "); ok {
			dir = rest
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	exited := time.Now()
	if len(pids) < 3 || !strings.HasPrefix(dir, tmp) {
		t.Fatalf("the child did not start kube-apiserver, etcd and kube-controller-manager under %s:\n%s", tmp, strings.Join(lines, "\n"))
	}
	waitGone(t, pids, exited)
	left := func() []string {
		var out []string
		_ = filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
			if path != tmp && path != filepath.Join(tmp, "ensemble-pids") {
				out = append(out, path)
			}
			return nil
		})
		return out
	}
	NewWithT(t).Eventually(left).WithTimeout(2*time.Second).WithPolling(5*time.Millisecond).
		Should(BeEmpty(), "left in the killed binary's temp directory")
}

// TestReapRemovesDeadOwnersDirs: a plane's working directory whose owner is gone (its watchdog killed
// too, or the owner killed before it wrote its pid file) is removed by the next Start's ReapOrphans; a live
// owner's is kept.
func TestReapRemovesDeadOwnersDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tmp, planeDirPrefix+strconv.Itoa(gone.Process.Pid)+"-1")
	live := filepath.Join(tmp, planeDirPrefix+strconv.Itoa(os.Getpid())+"-2")
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(filepath.Join(d, "kube-controller-manager"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "kube-controller-manager", "kubeconfig"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ReapOrphans()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the working directory of dead process %d is still there (%v)", gone.Process.Pid, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("the working directory of this live process was removed: %v", err)
	}
}

// waitGone waits (at most 2 s) until none of pids runs, and reports how long that took after the child
// exited.
func waitGone(t *testing.T, pids []int, exited time.Time) {
	t.Helper()
	alive := func() []string {
		var out []string
		for _, pid := range pids {
			if running(pid) {
				out = append(out, fmt.Sprintf("%d (%s)", pid, comm(pid)))
			}
		}
		return out
	}
	NewWithT(t).Eventually(alive).WithTimeout(2*time.Second).WithPolling(5*time.Millisecond).
		Should(BeEmpty(), "still running 2 s after the test binary ended")
	t.Logf("control plane of the dead test binary gone %s after it exited", time.Since(exited).Round(time.Millisecond))
}
