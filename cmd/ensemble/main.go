// Command ensemble runs ensemble's commands on a scenario suite in any Go module: a Ginkgo suite whose
// BeforeSuite boots the harness (suite.Boot). Run it from the module that holds the suite, which requires
// github.com/ensembletest/ensemble:
//
//	go run github.com/ensembletest/ensemble/cmd/ensemble <command> [flags]
//
//	explore        perturb the focused specs one point at a time and compare with their unperturbed runs
//	mutate         the suite's mutation score over a package of the module
//	flake          run the suite (or its focused specs) N times
//	bisect         the first commit at which the focused specs fail
//	defect-matrix  flip each defect of the suite's catalog and check that its specs notice
//
// `ensemble -h` lists the commands and `ensemble <command> -h` gives a command's flags. Each command runs
// its children (go test -c, the compiled suite, git, gremlins) in process groups of their own and ends
// them on SIGINT or SIGTERM. go run does not pass SIGTERM on to the command it runs, so a Makefile that
// runs it builds it first (go build -o bin/ensemble github.com/ensembletest/ensemble/cmd/ensemble).
//
// Exit 2 with one line for a missing or unknown command; otherwise the command's own exit code.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/ensembletest/ensemble/internal/bisect"
	"github.com/ensembletest/ensemble/internal/defectmatrix"
	"github.com/ensembletest/ensemble/internal/explore"
	"github.com/ensembletest/ensemble/internal/flake"
	"github.com/ensembletest/ensemble/internal/mutate"
	"github.com/ensembletest/ensemble/internal/proc"
)

// command is one subcommand: its name, what it does in one line, and its entry.
type command struct {
	name, about string
	main        func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands are the subcommands, in the order -h lists them.
var commands = []command{
	{"explore", explore.About, explore.Main},
	{"mutate", mutate.About, mutate.Main},
	{"flake", flake.About, flake.Main},
	{"bisect", bisect.About, bisect.Main},
	{"defect-matrix", defectmatrix.About, defectmatrix.Main},
}

func main() {
	ctx, stop := proc.SignalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args (os.Args[1:]) to their command and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "ensemble: name a command: %s (ensemble -h describes them)\n", names())
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stderr)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.main(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "ensemble: unknown command %q: use one of %s (ensemble -h describes them)\n", args[0], names())
	return 2
}

// names lists the commands' names.
func names() string {
	var out []string
	for _, c := range commands {
		out = append(out, c.name)
	}
	return strings.Join(out, ", ")
}

// usage prints the synopsis and a line per command.
func usage(w io.Writer) {
	fmt.Fprint(w, `usage: ensemble <command> [flags]

ensemble's commands, on the Ginkgo suite of the module you run them in (one whose BeforeSuite calls
suite.Boot); go run github.com/ensembletest/ensemble/cmd/ensemble <command> runs one. ensemble <command> -h
gives its flags.

commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.about)
	}
	tw.Flush()
}
