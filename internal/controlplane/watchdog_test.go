package controlplane

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestWatchdogChild is the child of TestNothingOutlivesAPanic: it starts a control plane, prints its
// processes, and panics without stopping it.
func TestWatchdogChild(t *testing.T) {
	if os.Getenv("ENSEMBLE_WATCHDOG_CHILD") != "1" {
		t.Skip("run by TestNothingOutlivesAPanic")
	}
	p, err := Start(&envtest.Environment{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("PIDS %v\n", strings.Trim(fmt.Sprint(p.children()), "[]"))
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
		Should(BeEmpty(), "still running 2 s after the test binary panicked")
	t.Logf("control plane of the panicked binary gone %s after it exited", time.Since(exited).Round(time.Millisecond))
}
