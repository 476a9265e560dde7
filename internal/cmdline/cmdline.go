// Package cmdline parses the command line of ensemble's commands (explore, mutate, defect-matrix, flake,
// bisect) so that a flag that does not parse is one line that names the flag, its make variable and what it
// takes, not the flag package's usage listing.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Parse parses args (os.Args[1:]) into fs's flags (flag.CommandLine for a command). makeVars maps a flag's name
// to the make variable that sets it ("max": "MAX"), for the error line. -h prints the flags to stderr and
// exits 0. Errors: one line, "-max (make's MAX): invalid value "x": pass a whole number (<the flag's
// usage>)", or the flag
// package's own for an unknown flag, with "(-h lists the flags)".
func Parse(fs *flag.FlagSet, args []string, makeVars map[string]string) error {
	err := parse(fs, args, makeVars)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		os.Exit(0)
	}
	return err
}

// Flags parses args into fs's flags as Parse does, for a subcommand's Main, which must not exit: -h (or
// -help) writes fs.Usage's text to stderr and returns flag.ErrHelp, which the caller turns into exit 0.
// A subcommand takes no positional argument. Errors: those of Parse, flag.ErrHelp, and one line naming an
// argument that is not a flag.
func Flags(fs *flag.FlagSet, args []string, makeVars map[string]string, stderr io.Writer) error {
	err := parse(fs, args, makeVars)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stderr)
		fs.Usage()
		return err
	}
	if err == nil && fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every input is a flag (-h lists them)", fs.Arg(0))
	}
	return err
}

// Parsed parses args into fs's flags as Flags does, then calls check (nil: none) to read the parsed values.
// It says whether the command goes on and, when it does not, the code to exit with: 0 after -h, failCode
// after a bad command line, whose one line, "<fs's name>: <error>", it writes to stderr.
func Parsed(fs *flag.FlagSet, args []string, makeVars map[string]string, stderr io.Writer, failCode int, check func() error) (int, bool) {
	err := Flags(fs, args, makeVars, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0, false
	}
	if err == nil && check != nil {
		err = check()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return failCode, false
	}
	return 0, true
}

// Usage sets fs.Usage to print "usage: <synopsis>", a blank line, about (a paragraph or more, as written),
// then "flags:" and fs's flags with their defaults, to fs's output.
func Usage(fs *flag.FlagSet, synopsis, about string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\n%s\n\nflags:\n", synopsis, strings.TrimSpace(about))
		fs.PrintDefaults()
	}
}

// parse parses args into fs with its output discarded. Errors: flag.ErrHelp for -h, else Parse's.
func parse(fs *flag.FlagSet, args []string, makeVars map[string]string) error {
	fs.Init(fs.Name(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	// The flag package says `invalid value "x" for flag -name: parse error`.
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		if value, name, ok := strings.Cut(rest, " for flag -"); ok {
			name, _, _ = strings.Cut(name, ":")
			if f := fs.Lookup(name); f != nil {
				return fmt.Errorf("%s: invalid value %s: pass %s (%s)", Name(name, makeVars), value, kind(f.Value), f.Usage)
			}
		}
	}
	return fmt.Errorf("%v (-h lists the flags)", err)
}

// kind says what a flag's value takes, from its type.
func kind(v flag.Value) string {
	switch fmt.Sprintf("%T", v) {
	case "*flag.intValue", "*flag.int64Value", "*flag.uintValue", "*flag.uint64Value":
		return "a whole number"
	case "*flag.durationValue":
		return "a duration such as 20m"
	case "*flag.boolValue":
		return "true or false"
	case "*flag.float64Value":
		return "a number"
	}
	return "a valid value"
}

// Name is how an error line names a flag: "-max (make's MAX)", or "-max" when no make variable sets it.
func Name(flagName string, makeVars map[string]string) string {
	if v := makeVars[flagName]; v != "" {
		return fmt.Sprintf("-%s (make's %s)", flagName, v)
	}
	return "-" + flagName
}
