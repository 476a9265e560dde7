package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/ensembletest/ensemble/internal/proc"
	"github.com/ensembletest/ensemble/internal/suitebin"
)

// PLACEHOLDER: explore is still the command internal/cmd/explore (package main), which another change is
// editing. Until it becomes the package internal/explore with a Main like the other commands', this entry
// builds that command in the working directory's module (which requires ensemble, so the build resolves
// the same ensemble as this binary) and runs it with the arguments, passing its exit code on. Moving it in
// replaces exploreMain and exploreAbout with explore.Main and explore.About and deletes this file.

// explorePackage is the command the placeholder builds.
const explorePackage = "github.com/ensembletest/ensemble/internal/cmd/explore"

// exploreAbout is what explore does, in one line.
const exploreAbout = "perturb the focused specs one point at a time and compare with their unperturbed runs (-suite . for this module's suite)"

// exploreMain builds internal/cmd/explore into a temporary directory and runs it with args, in its own
// process group (ended on an interrupt, as proc.Run ends it), with KUBEBUILDER_ASSETS set to the envtest
// binaries the harness would find when it is unset, and returns its exit code; 2 with one line when it
// cannot be built.
func exploreMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	dir, err := os.MkdirTemp("", "ensemble-explore-bin-")
	if err != nil {
		fmt.Fprintf(stderr, "explore: %v\n", err)
		return 2
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "explore")
	build := exec.Command("go", "build", "-o", bin, explorePackage)
	var out bytes.Buffer
	build.Stdout, build.Stderr = &out, &out
	if err := proc.Run(ctx, build); err != nil {
		fmt.Fprintf(stderr, "explore: cannot build %s in this module (%v): %s\n", explorePackage, err, suitebin.Tail(out.String(), 1))
		return 2
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// internal/cmd/explore wants KUBEBUILDER_ASSETS set; the harness's own default layout does too here.
	if dir, err := suitebin.Assets(); err == nil && os.Getenv("KUBEBUILDER_ASSETS") == "" {
		cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+dir)
	}
	err = proc.Run(ctx, cmd)
	if code, ok := proc.ExitCode(err); ok {
		return code
	}
	fmt.Fprintf(stderr, "explore: %v\n", err)
	return 2
}
