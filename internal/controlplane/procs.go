package controlplane

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process bookkeeping: Boot writes the pids of the kube-apiserver, etcd and kube-controller-manager it
// started, and the plane's working directory, to <temp dir>/ensemble-pids/<test process pid>. Stop kills
// whatever envtest left alive and removes the directory and the file. A test process killed outright
// (SIGKILL, OOM) cannot clean up: its watchdog does, and the next Boot on the machine kills the control
// planes listed in the file of any test process that no longer exists and removes every working directory
// whose name carries the pid of a process that no longer exists.

// planeDirPrefix starts the name of a plane's working directory in the temp directory:
// ensemble-plane-<test process pid>-<random>.
const planeDirPrefix = "ensemble-plane-"

// controlPlaneNames are the command names of the processes a plane starts; the kernel cuts a command name
// to 15 characters, so kube-controller-manager shows as "kube-controller".
var controlPlaneNames = map[string]bool{"kube-apiserver": true, "etcd": true, "kube-controller": true}

func pidDir() string { return filepath.Join(os.TempDir(), "ensemble-pids") }

// procStat is what /proc/<pid>/stat says of a process: its command name (cut to 15 characters by the
// kernel), its state letter, its parent's pid and the CPU time it has used (user and system, in clock ticks).
type procStat struct {
	comm, state string
	ppid        int
	ticks       int64
}

// tick is one clock tick of /proc/<pid>/stat's CPU times: the kernel reports them in USER_HZ, 100 a second
// on every architecture Linux runs Kubernetes on.
const tick = 10 * time.Millisecond

// readStat reads /proc/<pid>/stat, "pid (comm) state ppid ...", in one read; ok is false when the process
// does not exist. comm may hold spaces and parentheses, so the fields are split after the last ')'.
func readStat(pid int) (st procStat, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, false
	}
	open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
	if open < 0 || end < open {
		return st, false
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 2 {
		return st, false
	}
	st.comm, st.state = string(b[open+1:end]), f[0]
	st.ppid, _ = strconv.Atoi(f[1])
	if len(f) > 12 {
		// Fields 14 and 15 of the line, utime and stime, are the 12th and 13th after the command name.
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		st.ticks = utime + stime
	}
	return st, true
}

// threadRunnable reports whether one of pid's threads is running or waiting to run (state R) or in
// uninterruptible disk wait (state D), from /proc/<pid>/task/<tid>/stat.
func threadRunnable(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, _ := os.ReadDir(dir)
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		if end := strings.LastIndexByte(string(b), ')'); end >= 0 && end+2 < len(b) && (b[end+2] == 'R' || b[end+2] == 'D') {
			return true
		}
	}
	return false
}

// comm returns a process's command name, or "" when it does not exist.
func comm(pid int) string {
	st, _ := readStat(pid)
	return st.comm
}

// isRunningPlane reports whether st is a control-plane process that has not exited (a zombie waiting to be
// reaped by its parent counts as gone).
func (st procStat) isRunningPlane() bool {
	return controlPlaneNames[st.comm] && st.state != "Z" && st.state != "X"
}

// running reports whether pid is a control-plane process that has not exited.
func running(pid int) bool {
	st, ok := readStat(pid)
	return ok && st.isRunningPlane()
}

// ChildControlPlanes lists the kube-apiserver, etcd and kube-controller-manager processes whose parent is
// this process. Start calls it every 10 ms while envtest starts, so it reads the kernel's list of each of
// this process's threads' children (a few files) and one stat file per child, not every process's stat file
// (a scan of /proc, done only where the kernel has no children lists).
func ChildControlPlanes() []int {
	var out []int
	for _, pid := range childPids() {
		if st, ok := readStat(pid); ok && st.ppid == os.Getpid() && st.isRunningPlane() {
			out = append(out, pid)
		}
	}
	return out
}

// childPids lists this process's children from /proc/self/task/<tid>/children, every thread's list since a
// child is listed under the thread that started it; without those files (a kernel built without
// CONFIG_PROC_CHILDREN) it lists every pid in /proc, for the caller to check each one's parent.
func childPids() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err == nil && len(tasks) > 0 {
		if _, err = os.Stat(filepath.Join("/proc/self/task", tasks[0].Name(), "children")); err == nil {
			var out []int
			for _, t := range tasks {
				b, _ := os.ReadFile(filepath.Join("/proc/self/task", t.Name(), "children"))
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						out = append(out, pid)
					}
				}
			}
			return out
		}
	}
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// KillAll sends SIGTERM to each pid that is still a control plane, waits up to 5 s, then SIGKILLs the rest.
func KillAll(pids []int) {
	alive := func() []int {
		var out []int
		for _, p := range pids {
			if running(p) {
				out = append(out, p)
			}
		}
		return out
	}
	left := alive()
	for _, p := range left {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = alive() {
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range left {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// ReapOrphans kills the control planes recorded by test processes that no longer exist, and removes the
// working directories (planeDirPrefix) of test processes that no longer exist, recorded or not (a process
// killed between making its directory and writing its pid file).
func ReapOrphans() {
	defer reapPlaneDirs()
	entries, _ := os.ReadDir(pidDir())
	for _, e := range entries {
		owner, err := strconv.Atoi(e.Name())
		if err != nil || syscall.Kill(owner, 0) == nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(pidDir(), e.Name()))
		var pids []int
		var dirs []string
		for _, f := range strings.Fields(string(b)) {
			if d, ok := strings.CutPrefix(f, "dir:"); ok {
				dirs = append(dirs, d)
			} else if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
		KillAll(pids)
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
		_ = os.Remove(filepath.Join(pidDir(), e.Name()))
	}
}

// KillNow sends SIGKILL to each pid that is still a control plane and waits (at most 2 s) until they are gone.
func KillNow(pids []int) {
	for _, p := range pids {
		if running(p) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		alive := false
		for _, p := range pids {
			if running(p) {
				alive = true
			}
		}
		if !alive {
			return
		}
	}
}

// reapPlaneDirs removes the planes' working directories in the temp directory whose owner (the pid in the
// name) no longer exists.
func reapPlaneDirs() {
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), planeDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		owner, err := strconv.Atoi(pid)
		if err != nil || owner <= 0 || !errors.Is(syscall.Kill(owner, 0), syscall.ESRCH) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
	}
}
