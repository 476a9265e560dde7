package controlplane

import (
	"os/exec"
	"slices"
	"testing"
)

// TestChildPidsListsAChildStartedByAnyThread starts a child and looks for it in childPids, the list Start
// reads every 10 ms while envtest starts; a child missing from it would never be recorded for the reaper.
func TestChildPidsListsAChildStartedByAnyThread(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sleep: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if pids := childPids(); !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("childPids() = %v, want it to hold the child %d", pids, cmd.Process.Pid)
	}
	st, ok := readStat(cmd.Process.Pid)
	if !ok || st.comm != "sleep" {
		t.Fatalf("readStat(%d) = %+v, %v; want the child sleep", cmd.Process.Pid, st, ok)
	}
}

// BenchmarkChildControlPlanes is the cost of one scan of the ones Start makes every 10 ms while envtest
// starts.
func BenchmarkChildControlPlanes(b *testing.B) {
	for b.Loop() {
		ChildControlPlanes()
	}
}
