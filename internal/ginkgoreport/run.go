package ginkgoreport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/proc"
)

// Run is one run of a compiled suite.
type Run struct {
	// Reports are the run's JSON report.
	Reports []types.Report
	// Code is the binary's exit code; Took its wall time.
	Code int
	Took time.Duration
}

// RunSuite runs the compiled suite bin in dir with args, -test.timeout=timeout and
// -ginkgo.json-report=report added, env added to this process's environment and its output to log, and
// reads the report. A failing suite is a Run; -test.timeout ends the binary (and the control plane it
// started), and a minute later, or when ctx is done, its whole process group is ended as proc.Run ends
// it (SIGTERM, so the suite stops its envtest and removes its directories, then SIGKILL). Errors: the
// binary could not be started, or it wrote no report (naming its exit code and wall time).
func RunSuite(ctx context.Context, bin, dir string, args, env []string, timeout time.Duration, report string, log io.Writer) (Run, error) {
	_ = os.Remove(report)
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	args = append([]string{"-test.timeout=" + timeout.String(), "-ginkgo.json-report=" + report}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	began := time.Now()
	err := proc.Run(ctx, cmd)
	res := Run{Took: time.Since(began)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.Code = exit.ExitCode()
	default:
		return res, fmt.Errorf("running %s: %w", bin, err)
	}
	if res.Reports, err = Read(report); err != nil {
		return res, fmt.Errorf("the run wrote no JSON report (exit %d after %s)", res.Code, res.Took.Round(time.Second))
	}
	return res, nil
}
