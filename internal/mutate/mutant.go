package mutate

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"go/scanner"
	"go/token"
	"io"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Status is what became of a mutant.
type Status string

const (
	Killed     Status = "KILLED"      // the suite failed with the mutant in place
	TimedOut   Status = "TIMED OUT"   // the suite did not finish in time (counted as killed: it noticed)
	Survived   Status = "SURVIVED"    // the suite passed with the mutant in place
	NotCovered Status = "NOT COVERED" // no spec of the suite runs the mutated line
	NotViable  Status = "NOT VIABLE"  // the mutated package does not build (or vet rejects it)
	NotRun     Status = "NOT RUN"     // covered, but left out by -max
	// Broken: the build failed in another file than the mutated one (a half-made edit in the checkout, say):
	// nothing is known about the mutant.
	Broken Status = "BROKEN"
)

// Mutant is one token replacement at one position of a file.
type Mutant struct {
	File      string // slash-separated, relative to the module root
	Line, Col int    // 1-based; Col counts bytes, as go/token does
	Kind      string // gremlins' mutator type, e.g. CONDITIONALS_NEGATION
	From, To  string // the token before and after
	Status    Status
	Detail    string // the failing spec of a killed mutant, the compile error of a non-viable one
	// Specs are the full texts of the specs whose coverage holds the mutant's position: its run's focus.
	Specs []string
	// Ran is how many specs the mutant's run ran (fewer than Specs once -ginkgo.fail-fast stopped it; -1
	// when the run wrote no report).
	Ran          int
	Compile, Run time.Duration // the mutated suite's go test -c, and its run (0 when there was none)
	// ID is the mutant's switch in the schema (from 1); 0 when it is compiled alone.
	ID int
	// Alone is why the schema cannot hold the mutant, which is then compiled alone with its token
	// replaced, as every mutant once was; "" for a mutant of the schema.
	Alone string
	// Solo marks a schema mutant evaluated while its package initialises: it is the only run of its test
	// process, active from the process's start.
	Solo bool
}

// Pos is file:line:col.
func (m Mutant) Pos() string { return fmt.Sprintf("%s:%d:%d", m.File, m.Line, m.Col) }

// mutations are gremlins v0.6.0's token replacements (internal/engine/mappings.go), by mutator type.
var mutations = map[string]map[token.Token]token.Token{
	"ARITHMETIC_BASE":       {token.ADD: token.SUB, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL, token.SUB: token.ADD},
	"CONDITIONALS_BOUNDARY": {token.GEQ: token.GTR, token.GTR: token.GEQ, token.LEQ: token.LSS, token.LSS: token.LEQ},
	"CONDITIONALS_NEGATION": {token.EQL: token.NEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR, token.LSS: token.GEQ, token.NEQ: token.EQL},
	"INCREMENT_DECREMENT":   {token.DEC: token.INC, token.INC: token.DEC},
	"INVERT_NEGATIVES":      {token.SUB: token.ADD},
	"INVERT_LOGICAL":        {token.LAND: token.LOR, token.LOR: token.LAND},
	"INVERT_LOOPCTRL":       {token.BREAK: token.CONTINUE, token.CONTINUE: token.BREAK},
	"INVERT_ASSIGNMENTS":    {token.ADD_ASSIGN: token.SUB_ASSIGN, token.MUL_ASSIGN: token.QUO_ASSIGN, token.QUO_ASSIGN: token.MUL_ASSIGN, token.REM_ASSIGN: token.MUL_ASSIGN, token.SUB_ASSIGN: token.ADD_ASSIGN},
	"INVERT_BITWISE":        {token.AND: token.OR, token.OR: token.AND, token.XOR: token.AND, token.AND_NOT: token.AND, token.SHL: token.SHR, token.SHR: token.SHL},
}

// gremlinsReport is the part of gremlins' -o JSON that names the mutants (file names relative to the
// directory gremlins was pointed at).
type gremlinsReport struct {
	Files []gremlinsFile `json:"files"`
}

// gremlinsFile is one file's mutants in gremlinsReport.
type gremlinsFile struct {
	FileName  string             `json:"file_name"`
	Mutations []gremlinsMutation `json:"mutations"`
}

// gremlinsMutation is one mutant of a gremlinsFile: its kind (gremlins' name, "CONDITIONALS_NEGATION") and
// its token's line and column (from 1).
type gremlinsMutation struct {
	Type   string `json:"type"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// parseGremlins reads gremlins' JSON report of a dry run over dir (module-relative) and returns its
// mutants, sorted by position and kind, with File module-relative. From and To are left to apply.
func parseGremlins(r io.Reader, dir string) ([]Mutant, error) {
	var rep gremlinsReport
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("gremlins report: %w", err)
	}
	var out []Mutant
	for _, f := range rep.Files {
		for _, m := range f.Mutations {
			out = append(out, Mutant{File: path.Join(dir, f.FileName), Line: m.Line, Col: m.Column, Kind: m.Type})
		}
	}
	sortMutants(out)
	return out, nil
}

func sortMutants(ms []Mutant) {
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		return a.Kind < b.Kind
	})
}

// apply returns src with m's token replaced, and m with From and To set. The token at m's position must
// be one m's kind replaces: a position that does not hold one means the mutant list and the source
// disagree, and is an error rather than a silently different mutant.
func apply(src []byte, m Mutant) ([]byte, Mutant, error) {
	fset := token.NewFileSet()
	file := fset.AddFile(m.File, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, 0)
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			return nil, m, fmt.Errorf("%s: no token there", m.Pos())
		}
		p := fset.Position(pos)
		if p.Line < m.Line || (p.Line == m.Line && p.Column < m.Col) {
			continue
		}
		if p.Line != m.Line || p.Column != m.Col {
			return nil, m, fmt.Errorf("%s: no token starts there", m.Pos())
		}
		to, ok := mutations[m.Kind][tok]
		if !ok {
			return nil, m, fmt.Errorf("%s: %s does not mutate %q", m.Pos(), m.Kind, tok)
		}
		off := file.Offset(pos)
		m.From, m.To = tok.String(), to.String()
		out := make([]byte, 0, len(src)+len(m.To)-len(m.From))
		out = append(out, src[:off]...)
		out = append(out, m.To...)
		out = append(out, src[off+len(m.From):]...)
		return out, m, nil
	}
}

// block is one statement block of a coverage profile.
type block struct{ startLine, startCol, endLine, endCol int }

// Coverage holds, by module-relative file, the blocks some spec executed and, for each, the full texts of
// the specs that executed it at least once.
type Coverage map[string]map[block]map[string]bool

var profileLine = regexp.MustCompile(`^(.+):(\d+)\.(\d+),(\d+)\.(\d+) \d+ (\d+)$`)

// Read adds the go test -coverprofile file of one run of spec (its full text) to c; import paths under
// module become module-relative. Errors: a line that is not a profile's.
func (c Coverage) Read(r io.Reader, module, spec string) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		g := profileLine.FindStringSubmatch(line)
		if g == nil {
			return fmt.Errorf("coverage profile of %q: cannot read %q", spec, line)
		}
		if g[6] == "0" {
			continue
		}
		n := make([]int, 4)
		for i := range n {
			n[i], _ = strconv.Atoi(g[i+2])
		}
		f := strings.TrimPrefix(g[1], module+"/")
		b := block{n[0], n[1], n[2], n[3]}
		if c[f] == nil {
			c[f] = map[block]map[string]bool{}
		}
		if c[f][b] == nil {
			c[f][b] = map[string]bool{}
		}
		c[f][b][spec] = true
	}
	return sc.Err()
}

// Specs are the specs that executed a block holding file:line:col, sorted; none when no spec ran it.
func (c Coverage) Specs(file string, line, col int) []string {
	set := map[string]bool{}
	for b, specs := range c[file] {
		after := line > b.startLine || (line == b.startLine && col >= b.startCol)
		before := line < b.endLine || (line == b.endLine && col <= b.endCol)
		if after && before {
			for s := range specs {
				set[s] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// focus is the -ginkgo.focus regexp that selects exactly the specs of these full texts in the suite of
// this description: Ginkgo matches the focus against the suite's description, a space and the spec's full
// text, so each text is quoted and the alternation anchored at both ends.
func focus(description string, specs []string) string {
	quoted := make([]string, len(specs))
	for i, s := range specs {
		quoted[i] = regexp.QuoteMeta(s)
	}
	return "^" + regexp.QuoteMeta(description) + " (?:" + strings.Join(quoted, "|") + ")$"
}

// Changed holds, by module-relative file, the line ranges (inclusive) a diff added or changed.
type Changed map[string][][2]int

var hunkHeader = regexp.MustCompile(`^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@`)

// parseDiff reads `git diff -U0` output (run from the module root, so paths are module-relative).
func parseDiff(r io.Reader) (Changed, error) {
	ch := Changed{}
	file := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "+++ "):
			file = ""
			if name := strings.TrimPrefix(line, "+++ "); strings.HasPrefix(name, "b/") {
				file = strings.TrimPrefix(name, "b/")
			}
		case strings.HasPrefix(line, "@@ "):
			g := hunkHeader.FindStringSubmatch(line)
			if g == nil {
				return nil, fmt.Errorf("diff: cannot read hunk header %q", line)
			}
			start, _ := strconv.Atoi(g[1])
			n := 1
			if g[2] != "" {
				n, _ = strconv.Atoi(g[2])
			}
			if n > 0 && file != "" {
				ch[file] = append(ch[file], [2]int{start, start + n - 1})
			}
		}
	}
	return ch, sc.Err()
}

// Has says whether the diff changed file's line.
func (c Changed) Has(file string, line int) bool {
	for _, r := range c[file] {
		if line >= r[0] && line <= r[1] {
			return true
		}
	}
	return false
}

// pick returns the indices of max items out of n, evenly spaced so that a partial run samples every file
// rather than the first ones; all of them when max is 0 or at least n.
func pick(n, max int) []int {
	if max <= 0 || max >= n {
		max = n
	}
	out := make([]int, max)
	for i := range out {
		out[i] = i * n / max
	}
	return out
}

var (
	ginkgoFail  = regexp.MustCompile(`^\s*\[(FAIL|PANICKED|TIMEDOUT|INTERRUPTED)\] (.+)$`)
	compileLine = regexp.MustCompile(`^\S+\.go:\d+:\d+: .+$`)
	goFail      = regexp.MustCompile(`^--- FAIL`)
)

// classifyBuild turns a failed go test -c of the suite with file mutated into a status, from the go
// command's combined output. The compiler names a file an overlay replaces by its replacement, overlaid.
func classifyBuild(file, overlaid, output string) (Status, string) {
	first := ""
	for _, l := range strings.Split(output, "\n") {
		if !compileLine.MatchString(l) {
			continue
		}
		if strings.HasPrefix(l, overlaid+":") {
			return NotViable, file + strings.TrimPrefix(l, overlaid)
		}
		if first == "" {
			first = strings.TrimSpace(l)
		}
	}
	return Broken, "the build failed outside " + file + ": " + first
}

// classifyRun turns one run of the compiled suite into a status: exitCode is the test binary's (0 passed, -1
// it was killed at the deadline), output its combined output.
func classifyRun(exitCode int, deadline bool, output string) (Status, string) {
	lines := strings.Split(output, "\n")
	first := func(re *regexp.Regexp) string {
		for _, l := range lines {
			if re.MatchString(l) {
				return strings.TrimSpace(l)
			}
		}
		return ""
	}
	switch {
	case deadline || strings.Contains(output, "panic: test timed out after"):
		return TimedOut, first(ginkgoFail)
	case exitCode == 0:
		return Survived, ""
	}
	// Ginkgo's closing summary names the failed specs, each on a [FAIL] line.
	detail := ""
	for i, l := range lines {
		if strings.HasPrefix(l, "Summarizing ") {
			for _, next := range lines[i+1:] {
				if g := ginkgoFail.FindStringSubmatch(next); g != nil {
					detail = "[" + g[1] + "] " + g[2]
					break
				}
			}
			break
		}
	}
	if detail == "" {
		detail = first(ginkgoFail)
	}
	if detail == "" {
		detail = first(goFail)
	}
	return Killed, detail
}

// tally is one row of the report.
type tally struct {
	name                                                                     string
	total, killed, timedOut, survived, notCovered, notViable, notRun, broken int
}

func (t *tally) add(s Status) {
	t.total++
	switch s {
	case Killed:
		t.killed++
	case TimedOut:
		t.timedOut++
	case Survived:
		t.survived++
	case NotCovered:
		t.notCovered++
	case NotViable:
		t.notViable++
	case NotRun:
		t.notRun++
	case Broken:
		t.broken++
	}
}

// score is killed (timed out included) over killed and survived, "-" when nothing ran.
func (t tally) score() string {
	k := t.killed + t.timedOut
	if k+t.survived == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(k)/float64(k+t.survived))
}

// coverage is the covered mutants over the viable ones (broken ones left out: their viability is unknown).
func (t tally) coverage() string {
	viable := t.total - t.notViable - t.broken
	if viable == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(viable-t.notCovered)/float64(viable))
}

// Header describes the run for the report's first lines.
type Header struct {
	Pkg, Suite, Labels, Base string
	// Mutants dropped: in generated files, in nested modules, on lines the diff did not change.
	Generated, OtherModules, OutsideBase int
	// Specs is how many specs the per-spec coverage ran, each alone, in Coverage.
	Specs    int
	Coverage time.Duration
	Wall     time.Duration
	// Schema is the mutant schema's compile time; SchemaMutants how many mutants it held, Alone how many
	// were compiled alone; Processes and Runs the test processes of the schema and the runs they made.
	Schema                                time.Duration
	SchemaMutants, Alone, Processes, Runs int
}

// report writes the per-file table, the totals and the survivors.
func report(w io.Writer, h Header, ms []Mutant) {
	fmt.Fprintf(w, "\nmutation score of %s (label filter %q) over %s", h.Suite, h.Labels, h.Pkg)
	if h.Base != "" {
		fmt.Fprintf(w, ", lines changed since %s", h.Base)
	}
	fmt.Fprintln(w)
	if h.Generated > 0 {
		fmt.Fprintf(w, "left out: %d mutants in generated files\n", h.Generated)
	}
	if h.OtherModules > 0 {
		fmt.Fprintf(w, "left out: %d mutants in nested modules\n", h.OtherModules)
	}
	if h.Base != "" {
		fmt.Fprintf(w, "left out: %d mutants on lines unchanged since %s\n", h.OutsideBase, h.Base)
	}
	byFile := map[string]*tally{}
	var files []string
	total := tally{name: "total"}
	for _, m := range ms {
		t, ok := byFile[m.File]
		if !ok {
			t = &tally{name: strings.TrimPrefix(m.File, h.Pkg+"/")}
			byFile[m.File] = t
			files = append(files, m.File)
		}
		t.add(m.Status)
		total.add(m.Status)
	}
	sort.Strings(files)
	width := len("total")
	for _, f := range files {
		width = max(width, len(byFile[f].name))
	}
	row := func(t tally) {
		fmt.Fprintf(w, "%-*s %7d %6d %9d %8d %11d %10d %7d %7s %9s\n", width, t.name, t.total, t.killed, t.timedOut,
			t.survived, t.notCovered, t.notViable, t.notRun, t.score(), t.coverage())
	}
	fmt.Fprintf(w, "%-*s %7s %6s %9s %8s %11s %10s %7s %7s %9s\n", width, "file", "mutants", "killed", "timed out",
		"survived", "not covered", "not viable", "not run", "score", "covered")
	for _, f := range files {
		row(*byFile[f])
	}
	row(total)
	fmt.Fprintln(w, "score: killed (timed out included) / (killed + survived); covered: mutants a spec runs / viable mutants")
	if total.notRun > 0 {
		fmt.Fprintf(w, "%d covered mutants not run (-max): the score is over an evenly spaced sample of %d\n",
			total.notRun, total.killed+total.timedOut+total.survived)
	}
	var survivors, broken []Mutant
	for _, m := range ms {
		switch m.Status {
		case Survived:
			survivors = append(survivors, m)
		case Broken:
			broken = append(broken, m)
		}
	}
	if len(broken) > 0 {
		fmt.Fprintf(w, "broken (%d, in no column: the build failed in another file than the mutated one, so nothing is known of them):\n", len(broken))
		for _, m := range broken {
			fmt.Fprintf(w, "  %s %s (%s -> %s): %s\n", m.Pos(), m.Kind, m.From, m.To, m.Detail)
		}
	}
	fmt.Fprintf(w, "survivors (%d):\n", len(survivors))
	for _, m := range survivors {
		fmt.Fprintf(w, "  %s %s (%s -> %s)\n", m.Pos(), m.Kind, m.From, m.To)
	}
	if h.Wall == 0 {
		return
	}
	fmt.Fprintf(w, "wall time: %s, per-spec coverage of %d specs %s\n", h.Wall.Round(time.Second), h.Specs, h.Coverage.Round(time.Second))
	if h.SchemaMutants > 0 {
		fmt.Fprintf(w, "mutant schema: %d mutants as switches of one build (compiled in %s), judged in %d runs of %d test processes; %d compiled alone\n",
			h.SchemaMutants, h.Schema.Round(time.Second), h.Runs, h.Processes, h.Alone)
	}
	var compile, run, all []time.Duration
	var specs []int
	for _, m := range ms {
		if m.Compile > 0 {
			compile = append(compile, m.Compile)
		}
		if m.Run > 0 {
			specs = append(specs, len(m.Specs))
			run = append(run, m.Run)
			all = append(all, m.Compile+m.Run)
		}
	}
	if len(compile) > 0 {
		fmt.Fprintf(w, "per mutant, min/median/max: compile %s (%d compiled); specs covering %s, run %s, compile and run %s (%d run)\n",
			spread(compile, round), len(compile), spread(specs, strconv.Itoa), spread(run, round), spread(all, round), len(run))
	}
}

func round(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }

// spread is the minimum, median (the upper one of an even count) and maximum of xs, each formatted,
// slash-separated; "-" when xs is empty.
func spread[T cmp.Ordered](xs []T, format func(T) string) string {
	if len(xs) == 0 {
		return "-"
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return format(s[0]) + "/" + format(s[len(s)/2]) + "/" + format(s[len(s)-1])
}

// progress is the line printed when a mutant's run ends.
func progress(i, n int, m Mutant) string {
	ran := "?"
	if m.Ran >= 0 {
		ran = strconv.Itoa(m.Ran)
	}
	s := fmt.Sprintf("[%*d/%d] %-11s %s %s (%s -> %s) %s/%d specs, compile %s, run %s", len(strconv.Itoa(n)), i, n,
		m.Status, m.Pos(), m.Kind, m.From, m.To, ran, len(m.Specs), round(m.Compile), round(m.Run))
	if m.ID != 0 {
		s = fmt.Sprintf("[%*d/%d] %-11s %s %s (%s -> %s) %s/%d specs, run %s (schema)", len(strconv.Itoa(n)), i, n,
			m.Status, m.Pos(), m.Kind, m.From, m.To, ran, len(m.Specs), round(m.Run))
	}
	if m.Detail != "" {
		s += "  " + m.Detail
	}
	return s
}
