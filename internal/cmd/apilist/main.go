// Command apicount counts the exported API of Go packages: top-level funcs, types, constants and
// variables, and the methods of exported types, without tests. It prints one line per identifier with -v and the totals last.
//
// Usage: go run ./internal/cmd/apicount [-v] [-max N] DIR...
//
// With -max N it exits 1 when a directory exports more than N identifiers; that is how the suite package's
// budget is checked.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "print every exported identifier")
	limit := flag.Int("max", 0, "exit 1 when a directory exports more than this many identifiers (0: no limit)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apicount [-v] [-max N] DIR...: name the package directories to count")
		os.Exit(2)
	}
	over := false
	for _, dir := range flag.Args() {
		ids, err := exported(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "apicount: %v\n", err)
			os.Exit(2)
		}
		if *verbose {
			for _, id := range ids {
				fmt.Println("  " + id)
			}
		}
		counts := map[string]int{}
		for _, id := range ids {
			counts[strings.Fields(id)[0]]++
		}
		fmt.Printf("%s: %d exported (%d funcs, %d types, %d methods, %d constants and variables)\n", dir, len(ids), counts["func"], counts["type"], counts["method"], counts["value"])
		if *limit > 0 && len(ids) > *limit {
			fmt.Printf("%s: over the budget of %d\n", dir, *limit)
			over = true
		}
	}
	if over {
		os.Exit(1)
	}
}

// exported lists "func F", "type T", "value V" and "method T.M" for the package in dir, sorted.
func exported(dir string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%s holds no Go package", dir)
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
					if d.Recv == nil {
						out = append(out, "func "+d.Name.Name)
						continue
					}
					if recv := receiver(d.Recv.List[0].Type); ast.IsExported(recv) {
						out = append(out, "method "+recv+"."+d.Name.Name)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								out = append(out, "type "+s.Name.Name)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									out = append(out, "value "+n.Name)
								}
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

// receiver names a method's receiver type, without pointer and type parameters.
func receiver(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiver(t.X)
	case *ast.IndexExpr:
		return receiver(t.X)
	case *ast.IndexListExpr:
		return receiver(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}
