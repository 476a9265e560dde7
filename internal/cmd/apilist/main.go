// Command apilist lists the exported API of ensemble's library packages, the surface other operators'
// tests import: each package's exported funcs, types, constants and variables with their types, the
// exported fields of its structs, the methods of its exported types and those its interfaces declare, one
// line each, sorted, as Go's own api/ files list the standard library. docs/api.txt holds the listing a
// review accepted; TestAPIListingIsReviewed fails when the code's listing differs from it, so a change that
// adds, removes or changes an exported name updates that file in the same commit and the reviewer sees it.
//
// Usage: go run ./internal/cmd/apilist [-w] [-root DIR]
//
// It prints the listing; with -w it writes it to docs/api.txt instead. -root is the repository's root (".").
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// packages are the library's packages, by directory from the repository's root: what another module's
// specs import.
var packages = []string{"suite", "suite/mutant", "suite/perturb", "fakes/dataplane"}

// golden is the reviewed listing, from the repository's root.
const golden = "docs/api.txt"

func main() {
	write := flag.Bool("w", false, "write the listing to "+golden+" instead of printing it")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: apilist [-w] [-root DIR]: it takes no arguments")
		os.Exit(2)
	}
	text, err := listing(*root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "apilist: %v\n", err)
		os.Exit(2)
	}
	if *write {
		if err := os.WriteFile(filepath.Join(*root, golden), []byte(text), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "apilist: %v\n", err)
			os.Exit(2)
		}
		return
	}
	fmt.Print(text)
}

// listing renders the exported API of every package, with a header line giving the count per package.
func listing(root string) (string, error) {
	var b strings.Builder
	b.WriteString("# The exported API of ensemble's library packages: go run ./internal/cmd/apilist -w rewrites this file.\n")
	for _, dir := range packages {
		lines, err := exported(filepath.Join(root, dir))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "# %s: %d\n", dir, len(lines))
		for _, l := range lines {
			b.WriteString(dir + ", " + l + "\n")
		}
	}
	return b.String(), nil
}

// exported lists the package in dir's exported API (tests aside), one line per name, sorted: "func F(...)",
// "method (*T) M(...)", "type T struct", "field T.F type", "const C T = value", "var V T". Not listed: the
// type and value of a constant that takes them implicitly (after iota), a type's parameters, the members an
// unexported embedded struct promotes.
func exported(dir string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%s holds no Go package", dir)
	}
	str := func(e ast.Node) string {
		var buf bytes.Buffer
		_ = printer.Fprint(&buf, fset, e)
		return strings.Join(strings.Fields(buf.String()), " ")
	}
	var out []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					sig := strings.TrimPrefix(str(d.Type), "func")
					if d.Recv == nil {
						out = append(out, "func "+d.Name.Name+sig)
						continue
					}
					if recv := d.Recv.List[0].Type; ast.IsExported(receiver(recv)) {
						out = append(out, "method ("+str(recv)+") "+d.Name.Name+sig)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								out = append(out, typeLines(s, str)...)
							}
						case *ast.ValueSpec:
							for i, n := range s.Names {
								if !n.IsExported() {
									continue
								}
								l := d.Tok.String() + " " + n.Name
								if s.Type != nil {
									l += " " + str(s.Type)
								}
								// A constant's value is part of its contract (a mode's or an annotation's
								// string); a value iota gives implicitly is not written, nor is a var's.
								if d.Tok == token.CONST && i < len(s.Values) {
									l += " = " + str(s.Values[i])
								}
								out = append(out, l)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// typeLines lists an exported type: its kind, then its exported fields or its interface's methods.
func typeLines(s *ast.TypeSpec, str func(ast.Node) string) []string {
	name := s.Name.Name
	switch t := s.Type.(type) {
	case *ast.StructType:
		out := []string{"type " + name + " struct"}
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				if ast.IsExported(receiver(f.Type)) {
					out = append(out, "embedded "+name+"."+str(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					out = append(out, "field "+name+"."+n.Name+" "+str(f.Type))
				}
			}
		}
		return out
	case *ast.InterfaceType:
		out := []string{"type " + name + " interface"}
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				out = append(out, "embedded "+name+"."+str(m.Type))
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					out = append(out, "method "+name+"."+n.Name+strings.TrimPrefix(str(m.Type), "func"))
				}
			}
		}
		return out
	}
	return []string{"type " + name + " " + str(s.Type)}
}

// receiver names a method's receiver type, without pointer and type parameters.
func receiver(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiver(t.X)
	case *ast.IndexExpr:
		return receiver(t.X)
	case *ast.IndexListExpr:
		return receiver(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}
