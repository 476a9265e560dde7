package mutate

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"
)

// mutantPath is the import path of the switches (suite/mutant) the schema's rewritten files call.
const mutantPath = "github.com/ensembletest/ensemble/suite/mutant"

// source is one file of a mutated package, as go/packages loaded it.
type source struct {
	rel, abs string // module-relative (slash-separated) and absolute
	src      []byte
	file     *ast.File
	tf       *token.File
	pkg      *packages.Package
}

// program is the mutated packages, parsed and type-checked: the viability check and the rewrite work on it.
type program struct {
	fset  *token.FileSet
	files map[string]*source // by rel
	// mutant is suite/mutant, whose switches the rewritten files call; constraints are its switches' type
	// constraints by switch name, and comparable the universe's.
	mutant      *types.Package
	constraints map[string]*types.Interface
	comparable  *types.Interface
	// broken says why a package cannot be rewritten: it did not load or type-check.
	broken map[*packages.Package]string
}

// loadProgram loads the packages under pkg (module-relative; its subpackages too) with their syntax and
// types, and suite/mutant, from the module root (the working directory). Errors: go/packages's, or
// suite/mutant missing from the module's build list.
func loadProgram(ctx context.Context, pkg string) (*program, error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	pattern := "./" + strings.TrimPrefix(pkg+"/...", "./")
	cfg := &packages.Config{
		Context: ctx,
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles | packages.NeedImports | packages.NeedTypes |
			packages.NeedTypesInfo | packages.NeedSyntax | packages.NeedTypesSizes | packages.NeedModule,
		Fset: token.NewFileSet(),
	}
	pkgs, err := packages.Load(cfg, pattern, mutantPath)
	if err != nil {
		return nil, fmt.Errorf("loading %s for the mutant schema: %w", pattern, err)
	}
	p := &program{fset: cfg.Fset, files: map[string]*source{}, broken: map[*packages.Package]string{}, constraints: map[string]*types.Interface{}}
	p.comparable = types.Universe.Lookup("comparable").Type().Underlying().(*types.Interface)
	for _, lp := range pkgs {
		if lp.PkgPath == mutantPath {
			p.mutant = lp.Types
		}
		if len(lp.Errors) > 0 {
			p.broken[lp] = lp.Errors[0].Error()
		}
		for _, f := range lp.Syntax {
			abs := p.fset.File(f.Pos()).Name()
			rel, err := filepath.Rel(root, abs)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			src, err := os.ReadFile(abs)
			if err != nil {
				return nil, err
			}
			p.files[filepath.ToSlash(rel)] = &source{rel: filepath.ToSlash(rel), abs: abs, src: src, file: f, tf: p.fset.File(f.Pos()), pkg: lp}
		}
	}
	if p.mutant == nil || p.mutant.Scope().Lookup("Ordered") == nil {
		return nil, fmt.Errorf("the module's build list has no %s with its switches: require a version of ensemble that has it", mutantPath)
	}
	for _, name := range []string{"Ordered", "Arith", "Int"} {
		sig := p.mutant.Scope().Lookup(name).Type().(*types.Signature)
		p.constraints[name] = sig.TypeParams().At(0).Constraint().Underlying().(*types.Interface)
	}
	return p, nil
}

// check type-checks src's package with some of its files replaced (by absolute path) and returns the
// errors, the first first.
func (p *program) check(pkg *packages.Package, replaced map[string]*ast.File) []types.Error {
	files := make([]*ast.File, len(pkg.Syntax))
	for i, f := range pkg.Syntax {
		files[i] = f
		if r, ok := replaced[p.fset.File(f.Pos()).Name()]; ok {
			files[i] = r
		}
	}
	byPath := map[string]*types.Package{mutantPath: p.mutant}
	for _, ip := range pkg.Types.Imports() {
		byPath[ip.Path()] = ip
	}
	var errs []types.Error
	conf := types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if ip, ok := pkg.Imports[path]; ok {
				path = ip.PkgPath
			}
			if t, ok := byPath[path]; ok {
				return t, nil
			}
			return nil, fmt.Errorf("%s is not among %s's imports", path, pkg.PkgPath)
		}),
		Sizes: pkg.TypesSizes,
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) {
				errs = append(errs, te)
			}
		},
	}
	if pkg.Module != nil && pkg.Module.GoVersion != "" {
		conf.GoVersion = "go" + pkg.Module.GoVersion
	}
	_, _ = conf.Check(pkg.PkgPath, p.fset, files, nil)
	return errs
}

// importerFunc is a types.Importer made of a func.
type importerFunc func(path string) (*types.Package, error)

// Import is f(path): the package of that import path, or why there is none.
func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// siteForm is how a switch is written.
type siteForm int

const (
	formCall    siteForm = iota + 1 // a generic switch: Ordered, Equal, Arith or Int(x, y, op, alts...)
	formClosure                     // a comparison no generic switch takes: func() bool { if On(id) { return x op' y }; ... }()
	formLogic                       // Logic(x, func() bool { return y }, op, alts...)
	formNeg                         // Neg(x, ids...)
	formStmt                        // if On(id) { mutated } else { original }, in a closure outside a statement list
)

// alt is one mutant of a site: its switch ID and the operator it puts in place.
type alt struct {
	id int
	op token.Token
}

// site is one position of a file that the schema rewrites into a switch: a node whose operator one or more
// mutants replace.
type site struct {
	src        *source
	node       ast.Node
	start, end int // byte offsets of the node
	op         token.Token
	alts       []alt
	mutants    []int // indices into the mutants
	form       siteForm
	helper     string // the generic switch of formCall
	block      bool   // a statement in a statement list (formStmt)
}

// opNames are suite/mutant's names of the operators.
var opNames = map[token.Token]string{token.EQL: "EQL", token.NEQ: "NEQ", token.LSS: "LSS", token.LEQ: "LEQ", token.GTR: "GTR",
	token.GEQ: "GEQ", token.ADD: "ADD", token.SUB: "SUB", token.MUL: "MUL", token.QUO: "QUO", token.REM: "REM", token.AND: "AND",
	token.OR: "OR", token.XOR: "XOR", token.AND_NOT: "ANDNOT", token.LAND: "LAND", token.LOR: "LOR"}

// schemaResult is what the schema makes of the mutants it was given.
type schemaResult struct {
	// files are the rewritten files, by absolute path of the file they replace.
	files map[string][]byte
	// sites counts the switches written.
	sites int
}

// buildSchema decides, for each mutant of todo (indices into ms), how it is judged, and writes the
// rewritten files. A mutant whose switch the schema holds gets ms[i].ID (from 1, the index plus one); one
// the schema cannot hold gets ms[i].Alone, the reason it is compiled alone as before; one whose mutated
// package does not type-check is NotViable (or Broken, when the error is in another file) with the error.
// ms[i].Solo marks a switch evaluated while the package initialises (a package-level variable, an init
// func): it runs as the only run of its test process, active from the process's start. Errors: a mutant
// whose position holds no token of its kind (apply's).
func buildSchema(p *program, ms []Mutant, todo []int) (schemaResult, error) {
	return buildSchemaWith(p, ms, todo, nil)
}

// buildSchemaWith is buildSchema with tamper (when not nil) called on each site once its switch is
// picked: the tests break a switch with it.
func buildSchemaWith(p *program, ms []Mutant, todo []int, tamper func(*site)) (schemaResult, error) {
	res := schemaResult{files: map[string][]byte{}}
	sites := map[ast.Node]*site{}
	for _, i := range todo {
		m := &ms[i]
		src := p.files[m.File]
		switch {
		case src == nil:
			m.Alone = "go list does not load its file (a build constraint?)"
			continue
		case src.pkg.PkgPath == mutantPath:
			m.Alone = "it is in the switches' own package"
			continue
		case p.broken[src.pkg] != "":
			m.Alone = "its package does not load: " + p.broken[src.pkg]
			continue
		}
		mutated, withTokens, err := apply(src.src, *m)
		if err != nil {
			return res, err
		}
		m.From, m.To = withTokens.From, withTokens.To
		if m.Line < 1 || m.Line > src.tf.LineCount() {
			return res, fmt.Errorf("%s: no such line", m.Pos())
		}
		off := src.tf.Offset(src.tf.LineStart(m.Line)) + m.Col - 1
		n, path := nodeAt(src, off)
		if n == nil {
			m.Alone = "no operator node the schema rewrites starts there"
			continue
		}
		s := sites[n]
		if s == nil {
			s = &site{src: src, node: n, start: src.tf.Offset(n.Pos()), end: src.tf.Offset(n.End()), op: opOf(n)}
			if why := p.form(s, path); why != "" {
				m.Alone = why
				continue
			}
			sites[n] = s
		}
		if why := p.viable(src, mutated, off, n, m); why != "" {
			continue // NotViable or Broken, or Alone: set by viable
		}
		s.alts = append(s.alts, alt{id: i + 1, op: mutations[m.Kind][s.op]})
		s.mutants = append(s.mutants, i)
		m.ID = i + 1
		m.Solo = initTime(path)
	}
	// The files, each rewritten with its sites until the package type-checks; a site whose switch does not
	// type-check is dropped and its mutants compiled alone.
	bySrc := map[*source][]*site{}
	for _, s := range sites {
		if len(s.alts) == 0 {
			continue
		}
		if s.form = p.refine(s); s.form == formClosure && callsRecover(s.node) {
			dropAll(ms, []*site{s}, "a comparison no generic switch takes, whose closure would stop its recover() from recovering")
			continue
		}
		if tamper != nil {
			tamper(s)
		}
		bySrc[s.src] = append(bySrc[s.src], s)
	}
	byPkg := map[*packages.Package][]*source{}
	for src := range bySrc {
		byPkg[src.pkg] = append(byPkg[src.pkg], src)
	}
	for pkg, srcs := range byPkg {
		for {
			replaced := map[string]*ast.File{}
			texts := map[string][]byte{}
			for _, src := range srcs {
				if len(bySrc[src]) == 0 {
					continue
				}
				text := rewrite(src, bySrc[src], importName(pkg))
				f, err := parser.ParseFile(p.fset, src.abs, text, parser.SkipObjectResolution)
				if err != nil {
					dropAll(ms, bySrc[src], "its file's switches do not parse: "+err.Error())
					bySrc[src] = nil
					continue
				}
				replaced[src.abs], texts[src.abs] = f, text
			}
			errs := p.check(pkg, replaced)
			if len(errs) == 0 {
				for abs, text := range texts {
					res.files[abs] = text
				}
				break
			}
			e := errs[0]
			pos := p.fset.Position(e.Pos)
			var src *source
			for _, s := range srcs {
				if s.abs == pos.Filename {
					src = s
				}
			}
			if src == nil || len(bySrc[src]) == 0 {
				// An error outside the rewritten files: the package does not take its switches at all.
				for _, s := range srcs {
					dropAll(ms, bySrc[s], "its package's switches do not type-check: "+e.Msg)
					bySrc[s] = nil
				}
				break
			}
			// The innermost site on the error's line (a rewrite keeps every line where it was).
			var worst *site
			for _, s := range bySrc[src] {
				first, last := src.tf.Line(src.tf.Pos(s.start)), src.tf.Line(src.tf.Pos(s.end))
				if pos.Line >= first && pos.Line <= last && (worst == nil || s.end-s.start < worst.end-worst.start) {
					worst = s
				}
			}
			if worst == nil {
				dropAll(ms, bySrc[src], "its file's switches do not type-check: "+e.Msg)
				bySrc[src] = nil
				continue
			}
			dropAll(ms, []*site{worst}, "its switch does not type-check: "+e.Msg)
			bySrc[src] = slices.DeleteFunc(bySrc[src], func(s *site) bool { return s == worst })
		}
	}
	for _, ss := range bySrc {
		res.sites += len(ss)
	}
	return res, nil
}

// dropAll takes the sites' mutants out of the schema: each is compiled alone, for why.
func dropAll(ms []Mutant, sites []*site, why string) {
	for _, s := range sites {
		for _, i := range s.mutants {
			ms[i].ID, ms[i].Solo, ms[i].Alone = 0, false, why
		}
	}
}

// nodeAt finds the node whose operator token starts at byte offset off of src: a binary or unary
// expression, an increment or decrement, an assignment or a branch statement, with the path of nodes from
// the file down to it (the node last).
func nodeAt(src *source, off int) (ast.Node, []ast.Node) {
	pos := src.tf.Pos(off)
	var found ast.Node
	var path, stack []ast.Node
	ast.Inspect(src.file, func(n ast.Node) bool {
		if found != nil {
			return false
		}
		if n == nil {
			stack = stack[:len(stack)-1]
			return false
		}
		if n.Pos() > pos || n.End() <= pos {
			return false
		}
		stack = append(stack, n)
		var at token.Pos
		switch n := n.(type) {
		case *ast.BinaryExpr:
			at = n.OpPos
		case *ast.UnaryExpr:
			at = n.OpPos
		case *ast.IncDecStmt:
			at = n.TokPos
		case *ast.AssignStmt:
			at = n.TokPos
		case *ast.BranchStmt:
			at = n.TokPos
		}
		if at == pos && at.IsValid() {
			found = n
			path = slices.Clone(stack)
		}
		return true
	})
	return found, path
}

// opOf is the operator token of a node nodeAt finds.
func opOf(n ast.Node) token.Token {
	switch n := n.(type) {
	case *ast.BinaryExpr:
		return n.Op
	case *ast.UnaryExpr:
		return n.Op
	case *ast.IncDecStmt:
		return n.Tok
	case *ast.AssignStmt:
		return n.Tok
	case *ast.BranchStmt:
		return n.Tok
	}
	return token.ILLEGAL
}

// callsRecover says n calls the builtin recover, which returns nil when called from a closure.
func callsRecover(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(x ast.Node) bool {
		if c, ok := x.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "recover" {
				found = true
			}
		}
		return !found
	})
	return found
}

// initTime says the node of path is evaluated while its package initialises: in a package-level
// declaration or an init func.
func initTime(path []ast.Node) bool {
	if len(path) < 2 {
		return false
	}
	switch d := path[1].(type) {
	case *ast.GenDecl:
		return true
	case *ast.FuncDecl:
		return d.Recv == nil && d.Name.Name == "init"
	}
	return false
}

// form picks how a site's switch is written from its node alone (refine adjusts it once every mutant of
// the site is known), or says why the site cannot be a switch.
func (p *program) form(s *site, path []ast.Node) string {
	info := s.src.pkg.TypesInfo
	switch n := s.node.(type) {
	case *ast.BinaryExpr:
		if tv, ok := info.Types[n]; !ok || tv.Value != nil {
			return "a constant expression, which a switch call would make a variable one"
		}
		switch n.Op {
		case token.SHL, token.SHR:
			return "a shift, whose untyped left operand takes its type from the context"
		case token.LAND, token.LOR:
			if !isBool(info.Types[n].Type) {
				return "a logical expression of a named boolean type"
			}
			return s.set(formLogic, "")
		case token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ:
			if !isBool(info.Types[n].Type) {
				return "a comparison used as a named boolean type"
			}
			return s.set(formCall, "")
		case token.ADD, token.SUB, token.MUL, token.QUO, token.REM, token.AND, token.OR, token.XOR, token.AND_NOT:
			return s.set(formCall, "")
		}
	case *ast.UnaryExpr:
		if tv, ok := info.Types[n]; !ok || tv.Value != nil {
			return "a constant expression, which a switch call would make a variable one"
		}
		if n.Op == token.SUB && p.satisfies(info.Types[n].Type, p.constraints["Arith"]) {
			return s.set(formNeg, "")
		}
	case *ast.IncDecStmt, *ast.AssignStmt, *ast.BranchStmt:
		if a, ok := n.(*ast.AssignStmt); ok && (len(a.Lhs) != 1 || len(a.Rhs) != 1) {
			break
		}
		s.block = false
		if len(path) >= 2 {
			switch path[len(path)-2].(type) {
			case *ast.BlockStmt, *ast.CaseClause, *ast.CommClause, *ast.LabeledStmt:
				s.block = true
			}
		}
		if _, ok := n.(*ast.BranchStmt); ok && !s.block {
			break
		}
		return s.set(formStmt, "")
	}
	return fmt.Sprintf("no switch for %T %s", s.node, s.op)
}

// set gives s form f and the generic switch helper ("" for none yet), and returns "", which form returns
// for a site that can be a switch.
func (s *site) set(f siteForm, helper string) string {
	s.form, s.helper = f, helper
	return ""
}

// isBool says t is bool or untyped bool, what a switch returns.
func isBool(t types.Type) bool {
	b, ok := t.(*types.Basic)
	return ok && (b.Kind() == types.Bool || b.Kind() == types.UntypedBool)
}

// satisfies says t satisfies the constraint.
func (p *program) satisfies(t types.Type, constraint *types.Interface) bool {
	return t != nil && types.Satisfies(t, constraint)
}

// refine picks a binary expression's switch once all its mutants' operators are known: a generic switch
// whose type parameter Go infers from the operands, else (for a comparison) a closure.
func (p *program) refine(s *site) siteForm {
	n, ok := s.node.(*ast.BinaryExpr)
	if !ok || s.form != formCall {
		return s.form
	}
	info := s.src.pkg.TypesInfo
	ops := []token.Token{s.op}
	for _, a := range s.alts {
		ops = append(ops, a.op)
	}
	in := func(set ...token.Token) bool {
		for _, o := range ops {
			if !slices.Contains(set, o) {
				return false
			}
		}
		return true
	}
	switch {
	case in(token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ):
		t := operandType(info.Types[n.X].Type, info.Types[n.Y].Type)
		switch {
		case in(token.EQL, token.NEQ) && p.satisfies(t, p.comparable):
			s.helper = "Equal"
		case p.satisfies(t, p.constraints["Ordered"]):
			s.helper = "Ordered"
		default:
			return formClosure
		}
	case in(token.ADD, token.SUB, token.MUL, token.QUO) && p.satisfies(info.Types[n].Type, p.constraints["Arith"]):
		s.helper = "Arith"
	case p.satisfies(info.Types[n].Type, p.constraints["Int"]):
		s.helper = "Int"
	default:
		// No switch takes the operand type (a mutant no build would take); the typecheck of the
		// rewritten file drops it.
		s.helper = "Arith"
	}
	return formCall
}

// operandType is the one type Go infers for a generic switch's two operands: the typed one's when the
// other is untyped, their type when identical; nil otherwise (an interface beside a concrete type).
func operandType(x, y types.Type) types.Type {
	untyped := func(t types.Type) bool {
		b, ok := t.(*types.Basic)
		return ok && b.Info()&types.IsUntyped != 0
	}
	switch {
	case x == nil || y == nil:
		return nil
	case untyped(x) && !untyped(y):
		return y
	case untyped(y) && !untyped(x):
		return x
	case !untyped(x) && types.Identical(x, y):
		return x
	}
	return nil
}

// viable type-checks the package with the mutant's token replaced (mutated is its file's new text, off the
// token's offset, n its node in the original): a mutant the compiler would refuse is NotViable (Broken
// when the error is in another file), with the error as its detail. A replacement that regroups the
// expression (an operator of another precedence) is compiled alone, since its switch would keep the
// original grouping. It returns "" for a viable mutant.
func (p *program) viable(src *source, mutated []byte, off int, n ast.Node, m *Mutant) string {
	f, err := parser.ParseFile(p.fset, src.abs, mutated, parser.SkipObjectResolution)
	if err != nil {
		m.Status, m.Detail = NotViable, strings.Replace(err.Error(), src.abs, src.rel, 1)
		return m.Detail
	}
	tf := p.fset.File(f.Pos())
	same := false
	shift := len(m.To) - len(m.From)
	ast.Inspect(f, func(x ast.Node) bool {
		if x == nil || same {
			return false
		}
		if b, ok := x.(*ast.BinaryExpr); ok && tf.Offset(b.OpPos) == off {
			o, ok := n.(*ast.BinaryExpr)
			same = ok && tf.Offset(b.X.Pos()) == src.tf.Offset(o.X.Pos()) && tf.Offset(b.X.End()) == src.tf.Offset(o.X.End()) &&
				tf.Offset(b.Y.Pos()) == src.tf.Offset(o.Y.Pos())+shift && tf.Offset(b.Y.End()) == src.tf.Offset(o.Y.End())+shift
			return false
		}
		return true
	})
	if _, ok := n.(*ast.BinaryExpr); ok && !same {
		m.Alone = "the replaced token regroups the expression"
		return m.Alone
	}
	errs := p.check(src.pkg, map[string]*ast.File{src.abs: f})
	if len(errs) == 0 {
		return ""
	}
	for _, e := range errs {
		if pos := p.fset.Position(e.Pos); pos.Filename == src.abs {
			m.Status, m.Detail = NotViable, fmt.Sprintf("%s:%d:%d: %s", src.rel, pos.Line, pos.Column, e.Msg)
			return m.Detail
		}
	}
	pos := p.fset.Position(errs[0].Pos)
	m.Status, m.Detail = Broken, fmt.Sprintf("the build failed outside %s: %s:%d:%d: %s", src.rel, pos.Filename, pos.Line, pos.Column, errs[0].Msg)
	return m.Detail
}

// importName is the name the rewritten files of pkg import suite/mutant under: one no file of the package
// spells.
func importName(pkg *packages.Package) string {
	name := "ensemblemutant"
	for k := 0; ; k++ {
		if k > 0 {
			name = "ensemblemutant" + strconv.Itoa(k)
		}
		used := false
		for _, f := range pkg.Syntax {
			ast.Inspect(f, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && id.Name == name {
					used = true
				}
				return !used
			})
		}
		if !used {
			return name
		}
	}
}

// rewrite is src's text with each site replaced by its switch and suite/mutant imported as name, on the
// package clause's line so that every line keeps its number (a panic's or a log's line stays right).
func rewrite(src *source, sites []*site, name string) []byte {
	sorted := slices.Clone(sites)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].start != sorted[j].start {
			return sorted[i].start < sorted[j].start
		}
		return sorted[i].end > sorted[j].end
	})
	r := &renderer{src: src, sites: sorted, m: name}
	clause := src.tf.Offset(src.file.Name.End())
	return []byte(r.text(0, clause) + fmt.Sprintf("; import %s %q", name, mutantPath) + r.text(clause, len(src.src)))
}

// renderer writes the rewritten text of byte ranges of one file.
type renderer struct {
	src   *source
	sites []*site // by start, the enclosing before the enclosed
	m     string  // suite/mutant's import name
}

// text is src[a:b] with each outermost site inside it replaced by its switch, whose own operands are
// rendered the same way.
func (r *renderer) text(a, b int) string {
	var out strings.Builder
	at := a
	for _, s := range r.sites {
		if s.start < at || s.end > b {
			continue
		}
		out.Write(r.src.src[at:s.start])
		out.WriteString(r.site(s))
		at = s.end
	}
	out.Write(r.src.src[at:b])
	return out.String()
}

// of is the rendered text of node n, an operand of a site.
func (r *renderer) of(n ast.Node) string {
	return r.text(r.src.tf.Offset(n.Pos()), r.src.tf.Offset(n.End()))
}

// site is the switch that replaces s.
func (r *renderer) site(s *site) string {
	m := r.m
	alts := ""
	for _, a := range s.alts {
		alts += fmt.Sprintf(", %s.Alt{ID: %d, Op: %s.%s}", m, a.id, m, opNames[a.op])
	}
	switch s.form {
	case formCall:
		n := s.node.(*ast.BinaryExpr)
		return fmt.Sprintf("%s.%s(%s, %s, %s.%s%s)", m, s.helper, r.of(n.X), r.of(n.Y), m, opNames[s.op], alts)
	case formLogic:
		n := s.node.(*ast.BinaryExpr)
		return fmt.Sprintf("%s.Logic(%s, func() bool { return %s }, %s.%s%s)", m, r.of(n.X), r.of(n.Y), m, opNames[s.op], alts)
	case formClosure:
		n := s.node.(*ast.BinaryExpr)
		x, y := r.of(n.X), r.of(n.Y)
		var b strings.Builder
		b.WriteString("func() bool { ")
		for _, a := range s.alts {
			fmt.Fprintf(&b, "if %s.On(%d) { return %s %s %s }; ", m, a.id, x, a.op, y)
		}
		fmt.Fprintf(&b, "return %s %s %s }()", x, s.op, y)
		return b.String()
	case formNeg:
		n := s.node.(*ast.UnaryExpr)
		ids := ""
		for _, a := range s.alts {
			ids += ", " + strconv.Itoa(a.id)
		}
		return fmt.Sprintf("%s.Neg(%s%s)", m, r.of(n.X), ids)
	case formStmt:
		var b strings.Builder
		for k, a := range s.alts {
			if k > 0 {
				b.WriteString(" else ")
			}
			fmt.Fprintf(&b, "if %s.On(%d) { %s }", m, a.id, r.stmt(s, a.op))
		}
		fmt.Fprintf(&b, " else { %s }", r.stmt(s, s.op))
		if s.block {
			return b.String()
		}
		return "func() { " + b.String() + " }()"
	}
	return r.text(s.start, s.end)
}

// stmt is the statement of site s with operator op.
func (r *renderer) stmt(s *site, op token.Token) string {
	switch n := s.node.(type) {
	case *ast.IncDecStmt:
		return r.of(n.X) + op.String()
	case *ast.AssignStmt:
		return r.of(n.Lhs[0]) + " " + op.String() + " " + r.of(n.Rhs[0])
	case *ast.BranchStmt:
		if n.Label != nil {
			return op.String() + " " + n.Label.Name
		}
		return op.String()
	}
	return r.text(s.start, s.end)
}
