package proc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone waits until pid no longer runs (a zombie counts as gone) and fails the test after a minute.
func gone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still runs", pid)
}

// readPids reads the two pids the stand-in prints: its own and its child's.
func readPids(t *testing.T, r io.Reader) (int, int) {
	t.Helper()
	line, err := bufio.NewReader(r).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 {
		t.Fatalf("the stand-in said %q, %v", line, err)
	}
	a, _ := strconv.Atoi(f[0])
	b, _ := strconv.Atoi(f[1])
	return a, b
}

// standIn starts a child that would outlive it (a background job, which ignores SIGINT), says both pids,
// and on SIGINT removes its mark file (its cleanup) and exits.
const standIn = `trap 'rm -f "$MARK"; exit 130' INT; sleep 600 & echo $$ $!; wait`

func TestRunEndsTheWholeGroupWhenTheContextIsDone(t *testing.T) {
	grace = 2 * time.Second
	t.Cleanup(func() { grace = Grace })
	mark := t.TempDir() + "/mark"
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.Command("bash", "-c", standIn)
	cmd.Env = append(os.Environ(), "MARK="+mark)
	out, w := io.Pipe()
	cmd.Stdout = w
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cmd) }()
	_, child := readPids(t, out)
	cancel()
	go func() { _, _ = io.Copy(io.Discard, out) }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("Run = %v, want the stand-in's exit", err)
		}
	case <-time.After(Grace + 30*time.Second):
		t.Fatal("Run did not return after its context was done")
	}
	gone(t, child)
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("the stand-in's SIGINT cleanup did not run: %s is still there (%v)", mark, err)
	}
}

// TestRunChildDiesWithItsParent runs this test binary as a parent (PROC_TEST_PARENT) that starts the
// stand-in with Run, kills that parent with SIGKILL, and checks that the stand-in got its SIGINT.
func TestRunChildDiesWithItsParent(t *testing.T) {
	if mark := os.Getenv("PROC_TEST_PARENT"); mark != "" {
		cmd := exec.Command("bash", "-c", standIn)
		cmd.Env = append(os.Environ(), "MARK="+mark)
		cmd.Stdout = os.Stdout
		_ = Run(context.Background(), cmd)
		return
	}
	mark := t.TempDir() + "/mark"
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestRunChildDiesWithItsParent$")
	parent.Env = append(os.Environ(), "PROC_TEST_PARENT="+mark)
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	standInPid, child := readPids(t, out)
	_ = parent.Process.Signal(syscall.SIGKILL)
	_ = parent.Wait()
	gone(t, standInPid)
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("the stand-in got no SIGINT when its parent died: %s is still there (%v)", mark, err)
	}
	// The stand-in's own child is not in Run's reach once Run's process is dead.
	_ = syscall.Kill(child, syscall.SIGKILL)
}

func TestExitCode(t *testing.T) {
	if code, ok := ExitCode(nil); code != 0 || !ok {
		t.Errorf("ExitCode(nil) = %d, %v", code, ok)
	}
	if code, ok := ExitCode(exec.Command("sh", "-c", "exit 3").Run()); code != 3 || !ok {
		t.Errorf("ExitCode(exit 3) = %d, %v", code, ok)
	}
	if _, ok := ExitCode(exec.Command("/nonexistent/binary").Run()); ok {
		t.Error("ExitCode of a command that never started says it exited")
	}
}
