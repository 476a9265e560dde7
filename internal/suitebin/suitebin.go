// Package suitebin finds, checks and compiles the Ginkgo suite that ensemble's commands (defect-matrix, flake,
// bisect, mutate) run, in whichever Go module it is: the suite's package directory, the envtest binaries its
// runs need and its compiled test binary.
package suitebin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ensembletest/ensemble/internal/controlplane"
	"github.com/ensembletest/ensemble/internal/proc"
)

// Dir is the absolute package directory of the suite a -suite flag names (relative to the working
// directory). Errors: one line when the directory holds no _test.go file.
func Dir(suite string) (string, error) {
	dir, err := filepath.Abs(suite)
	if err != nil {
		return "", err
	}
	if tests, _ := filepath.Glob(filepath.Join(dir, "*_test.go")); len(tests) == 0 {
		return "", fmt.Errorf("-suite %s has no _test.go file: name the Ginkgo suite's package directory (the default, ., is the working directory)", suite)
	}
	return dir, nil
}

// Assets is the directory of the envtest binaries the suite's runs use, found as the harness finds it
// (controlplane.AssetsDir: $KUBEBUILDER_ASSETS, else setup-envtest's layout under $XDG_DATA_HOME). Checking
// it first says what is missing before anything is compiled. Errors: one line naming the missing binary.
func Assets() (string, error) {
	dir, err := controlplane.AssetsDir()
	if err != nil && os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return "", fmt.Errorf("%w (or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver, etcd and kube-controller-manager v%s)", err, controlplane.KubernetesVersion)
	}
	return dir, err
}

// Compile builds the test binary of the suite in dir into bin with `go test -c`, run in dir so that the
// suite's own go.mod applies; goFlags come before the package (-coverpkg=..., -overlay=...). ctx ends the
// build (proc.Run). Errors: the build's, with the last 40 lines of its output.
func Compile(ctx context.Context, dir, bin string, goFlags ...string) error {
	args := append([]string{"test", "-c", "-o", bin}, goFlags...)
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := proc.Run(ctx, cmd); err != nil {
		return fmt.Errorf("%s does not compile (%v):\n%s", dir, err, Tail(out.String(), 40))
	}
	return nil
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
