package ginkgoreport

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// dumpLine is what suite.Case logs when it writes a failure dump.
var dumpLine = regexp.MustCompile(`failure dump of \S+ written to (\S+)`)

// Failures prints every failed spec and suite node of reports (its name, location, message cut to maxLines
// lines, and the failure dumps it wrote) and the suites' special failure reasons, and returns how many
// failures it printed. File names under root ("" for none) are printed relative to it, in locations and
// messages (a bisect's worktree is gone by the time its failure is printed).
func Failures(w io.Writer, reports []types.Report, root string, maxLines int) int {
	n := 0
	for _, r := range reports {
		for _, sr := range r.SpecReports {
			if !sr.Failed() {
				continue
			}
			n++
			fmt.Fprintf(w, "%s %s\n", strings.ToUpper(sr.State.String()), Name(sr))
			fmt.Fprintf(w, "  spec at   %s\n", loc(sr.LeafNodeLocation, root))
			if sr.Failure.FailureNodeType != types.NodeTypeInvalid && sr.Failure.FailureNodeType != sr.LeafNodeType {
				fmt.Fprintf(w, "  in its    %s at %s\n", sr.Failure.FailureNodeType, loc(sr.Failure.FailureNodeLocation, root))
			}
			fmt.Fprintf(w, "  failed at %s\n", loc(sr.Failure.Location, root))
			msg := sr.Failure.Message
			if root != "" {
				msg = strings.ReplaceAll(msg, strings.TrimSuffix(root, "/")+"/", "")
			}
			fmt.Fprintf(w, "  message:\n%s\n", indent(msg, "    ", maxLines))
			if sr.Failure.ForwardedPanic != "" {
				fmt.Fprintf(w, "  panic: %s\n", sr.Failure.ForwardedPanic)
			}
			for _, af := range sr.AdditionalFailures {
				fmt.Fprintf(w, "  and then (%s) at %s:\n%s\n", af.State, loc(af.Failure.Location, root), indent(af.Failure.Message, "    ", 10))
			}
			if m := dumpLine.FindAllStringSubmatch(sr.CapturedGinkgoWriterOutput+"\n"+sr.CapturedStdOutErr, -1); len(m) > 0 {
				for _, d := range m {
					fmt.Fprintf(w, "  failure dump: %s\n", d[1])
				}
			} else {
				fmt.Fprintf(w, "  failure dump: none written by this spec\n")
			}
		}
		for _, reason := range r.SpecialSuiteFailureReasons {
			n++
			fmt.Fprintf(w, "SUITE FAILED: %s\n", reason)
		}
		if n > 0 && r.SuiteConfig.RandomSeed != 0 {
			fmt.Fprintf(w, "random seed %d: -ginkgo-flags=-ginkgo.seed=%d (make's GINKGO_FLAGS) runs the specs in this order again\n", r.SuiteConfig.RandomSeed, r.SuiteConfig.RandomSeed)
		}
	}
	return n
}

// loc prints a code location as file:line, relative to root when it is under it.
func loc(l types.CodeLocation, root string) string {
	if l.FileName == "" {
		return "(unknown)"
	}
	f := l.FileName
	if root != "" {
		if rel, err := filepath.Rel(root, f); err == nil && !strings.HasPrefix(rel, "..") {
			f = rel
		}
	}
	return fmt.Sprintf("%s:%d", f, l.LineNumber)
}

// indent prefixes each line of s, keeping at most max lines.
func indent(s, prefix string, max int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	more := 0
	if len(lines) > max {
		lines, more = lines[:max], len(lines)-max
	}
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	if more > 0 {
		lines = append(lines, fmt.Sprintf("%s... (%d more lines in the JSON report)", prefix, more))
	}
	return strings.Join(lines, "\n")
}

// timing is one spec's run times over the runs.
type timing struct {
	name  string
	times []time.Duration
}

// timings collects, per spec (and per BeforeSuite/AfterSuite node), the run time of every run in which it
// ran, slowest median first (ties by name).
func timings(runs [][]types.Report) []timing {
	byName := map[string]*timing{}
	var out []*timing
	for _, reports := range runs {
		for _, r := range reports {
			for _, sr := range r.SpecReports {
				if sr.State.Is(types.SpecStateSkipped | types.SpecStatePending) {
					continue
				}
				switch sr.LeafNodeType {
				case types.NodeTypeIt, types.NodeTypeBeforeSuite, types.NodeTypeSynchronizedBeforeSuite,
					types.NodeTypeAfterSuite, types.NodeTypeSynchronizedAfterSuite:
				default:
					continue
				}
				n := Name(sr)
				t := byName[n]
				if t == nil {
					t = &timing{name: n}
					byName[n] = t
					out = append(out, t)
				}
				t.times = append(t.times, sr.RunTime)
			}
		}
	}
	res := make([]timing, len(out))
	for i, t := range out {
		sort.Slice(t.times, func(a, b int) bool { return t.times[a] < t.times[b] })
		res[i] = *t
	}
	sort.SliceStable(res, func(a, b int) bool {
		if ma, mb := median(res[a].times), median(res[b].times); ma != mb {
			return ma > mb
		}
		return res[a].name < res[b].name
	})
	return res
}

// median of sorted durations (the mean of the middle two for an even count).
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

// Summary prints the timing table of runs (each run's reports): per spec and suite node that ran, how many
// runs it ran in and its min, median and max run time, slowest median first, then the whole suite's.
func Summary(w io.Writer, runs [][]types.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "runs\tmin\tmedian\tmax\t  %s\n", "spec")
	for _, t := range timings(runs) {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t  %s\n", len(t.times), round(t.times[0]), round(median(t.times)), round(t.times[len(t.times)-1]), t.name)
	}
	var totals []time.Duration
	for _, reports := range runs {
		var d time.Duration
		for _, r := range reports {
			d += r.RunTime
		}
		totals = append(totals, d)
	}
	sort.Slice(totals, func(a, b int) bool { return totals[a] < totals[b] })
	if len(totals) > 0 {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t  %s\n", len(totals), round(totals[0]), round(median(totals)), round(totals[len(totals)-1]), "(whole suite run)")
	}
	tw.Flush()
}

// round prints a duration to the millisecond (to the microsecond under 1 ms).
func round(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
