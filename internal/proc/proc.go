// Package proc runs the child processes of ensemble's commands (explore, mutate, defectmatrix: test
// binaries, go build, gremlins) so that an interrupted command leaves neither a process nor a temporary
// directory behind, and catches the command's own SIGINT and SIGTERM.
package proc

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Grace is how long a child has, after SIGINT, to end before its process group is killed (SIGKILL):
// longer than the control plane's own teardown, shorter than Ginkgo's 30 s interrupt grace, which a
// child that hangs in its cleanup would otherwise get in full.
const Grace = 20 * time.Second

// grace is Grace; the tests shorten it.
var grace = Grace

// SignalContext returns a context that is done at the first SIGINT or SIGTERM this process gets, and the
// function that stops catching them. A command passes the context to Run and, once Run has returned,
// removes its temporary directories and says it was interrupted; a second signal is caught too, so the
// cleanup is not cut short.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Run starts cmd in a process group of its own (a terminal's Ctrl-C reaches the command, which decides,
// not every child at once) and waits for it. When ctx is done first, the whole group gets SIGINT, as
// from a terminal (a Ginkgo suite stops its envtest, removes its directories and writes its report; the
// go command removes its work directory), and once cmd has exited, or after Grace, SIGKILL, which ends
// what ignored the SIGINT (a shell's background job). Should this process die first, even by SIGKILL,
// the kernel sends cmd SIGINT (Linux's parent-death signal). cmd.WaitDelay, when zero, becomes Grace:
// output pipes held by an orphaned grandchild do not block Run. Errors: cmd.Start's and cmd.Wait's, an
// *exec.ExitError for a non-zero exit.
func Run(ctx context.Context, cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = grace
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		_ = syscall.Kill(-pgid, syscall.SIGINT)
		// Until cmd has exited (a zombie: Wait may still be copying output that a background job holds
		// open) or the grace is over; then the rest of the group goes.
		for deadline := time.Now().Add(grace); time.Now().Before(deadline) && !exited(pgid); {
			select {
			case <-done:
				deadline = time.Time{}
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}()
	err := cmd.Wait()
	close(done)
	<-ended
	return err
}

// exited says pid is a zombie (it has exited and its parent has not reaped it yet) or gone.
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// ExitCode is the exit code of a command whose Run returned err: 0 for nil, an *exec.ExitError's code (-1
// for one a signal ended), and false for another error (the command could not be started or waited for).
func ExitCode(err error) (int, bool) {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &exit):
		return exit.ExitCode(), true
	}
	return 0, false
}
