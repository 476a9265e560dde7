// Package cmdline parses the command line of ensemble's commands (explore, mutate, defectmatrix) so that a
// flag that does not parse is one line that names the flag, its make variable and what it takes, not the
// flag package's usage listing.
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
	fs.Init(fs.Name(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		os.Exit(0)
	}
	if err == nil {
		return nil
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
