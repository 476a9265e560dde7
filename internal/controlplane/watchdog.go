package controlplane

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The watchdog is a small shell process started with the first control plane of a test process. It waits
// on a pipe whose other end only the test process holds: when the test process ends in any way (a panic,
// go test's -timeout, SIGKILL), the kernel closes the pipe and the watchdog at once kills the control-plane
// processes listed in the test process's pid file and removes their directories. It runs in a process
// group of its own, so a Ctrl-C to the terminal does not end it first. The next Boot's ReapOrphans stays as
// a second line for a watchdog that was killed too.

// watchdogScript reads until EOF on stdin, then kills what the pid file ($1) lists: pids whose command name
// is a control plane's, and "dir:" lines, which are removed.
const watchdogScript = `while read -r _; do :; done
f="$1"
[ -f "$f" ] || exit 0
while read -r l; do
  case "$l" in
    dir:*) rm -rf -- "${l#dir:}" ;;
    *) c=$(cat "/proc/$l/comm" 2>/dev/null)
       case "$c" in kube-apiserver|etcd|kube-controller) kill -9 "$l" ;; esac ;;
  esac
done < "$f"
rm -f -- "$f"`

var (
	watchdogOnce sync.Once
	// watchdogPipe is the write end of the watchdog's stdin; it is never written and never closed: the
	// kernel closes it when this process ends.
	watchdogPipe *os.File
)

// startWatchdog starts the watchdog once per process. A watchdog that cannot start leaves ReapOrphans as
// the only net.
func startWatchdog() {
	watchdogOnce.Do(func() {
		r, w, err := os.Pipe()
		if err != nil {
			return
		}
		defer r.Close()
		cmd := exec.Command("bash", "-c", watchdogScript, "ensemble-watchdog", filepath.Join(pidDir(), strconv.Itoa(os.Getpid())))
		cmd.Stdin = r
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			_ = w.Close()
			return
		}
		watchdogPipe = w
	})
}

// processStart approximates when go test's -timeout clock started: when this package was initialised.
var processStart = time.Now()

// timeoutOnce arms, once per process, the kill that beats go test's -timeout.
var timeoutOnce sync.Once

// beatTestTimeout kills every plane's processes half a second before go test's -timeout panics the test
// binary: the panic ends the process without any cleanup, and the watchdog would only act after it.
func beatTestTimeout() {
	timeoutOnce.Do(func() {
		f := flag.Lookup("test.timeout")
		if f == nil {
			return
		}
		d, err := time.ParseDuration(f.Value.String())
		if err != nil || d <= 0 {
			return
		}
		time.AfterFunc(time.Until(processStart.Add(d-500*time.Millisecond)), func() {
			planesMu.Lock()
			var pids []int
			for q := range planes {
				pids = append(pids, q.children()...)
			}
			planesMu.Unlock()
			KillNow(pids)
		})
	})
}
