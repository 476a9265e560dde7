package ginkgoreport

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// script writes an executable shell script into dir.
func script(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "suite.test")
	if err := os.WriteFile(p, []byte("#!/usr/bin/env bash\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunSuiteReadsTheReportOfAFailingRun(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "suite.json")
	// The stand-in writes a report to the path its -ginkgo.json-report names, says where it runs, and fails.
	bin := script(t, dir, `for a in "$@"; do case "$a" in -ginkgo.json-report=*) r="${a#*=}";; esac; done
echo "[{\"SuiteDescription\": \"$FAKE_DESC\"}]" >"$r"; pwd; echo "$@"; exit 3`)
	var log bytes.Buffer
	run, err := RunSuite(context.Background(), bin, dir, []string{"-ginkgo.v"}, []string{"FAKE_DESC=fake"}, time.Minute, report, &log)
	if err != nil || run.Code != 3 || len(run.Reports) != 1 || run.Reports[0].SuiteDescription != "fake" {
		t.Fatalf("RunSuite = %+v, %v\n%s", run, err, log.String())
	}
	if want := dir + "\n-test.timeout=1m0s -ginkgo.json-report=" + report + " -ginkgo.v\n"; log.String() != want {
		t.Errorf("output %q, want %q", log.String(), want)
	}
}

func TestRunSuiteWithoutAReport(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "suite.json")
	if err := os.WriteFile(report, []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A report left by an earlier run is not taken for this run's.
	_, err := RunSuite(context.Background(), script(t, dir, "exit 1"), dir, nil, nil, time.Minute, report, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "the run wrote no JSON report (exit 1") {
		t.Errorf("err = %v", err)
	}
}

func TestRunSuiteEndsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	// The stand-in starts a child that would outlive it; cancelling kills both (one process group).
	bin := script(t, dir, `sleep 600 & echo started; wait`)
	out, log := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := RunSuite(ctx, bin, dir, nil, nil, time.Hour, filepath.Join(dir, "suite.json"), log)
		done <- err
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("the stand-in said %q, %v", line, err)
	}
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no JSON report") {
			t.Errorf("err = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunSuite did not return after its context was cancelled")
	}
}
