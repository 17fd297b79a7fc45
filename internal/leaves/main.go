// Command leaves lists where the root package's core uses its optional
// features (issue 30): every use, in a core file, of a name declared in a
// feature's file, found by type-checking the package. A feature is a leaf
// when the core uses none of its names: the feature calls the core, never
// the other way. scripts/enginesize.sh runs it and names the same files.
//
//	go run ./internal/leaves [-uses] [-wiring features.go] class.go wait.go ...   # from the repository root
//
// The files given to -wiring (comma-separated) are neither core nor
// feature: the list that names the features for New. It prints one line
// per feature and, with -uses, each use as file:line: name.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	list := flag.Bool("uses", false, "list each use of a feature's names by the core")
	wiring := flag.String("wiring", "", "comma-separated files that are neither core nor feature")
	flag.Parse()
	if err := run(flag.Args(), strings.Split(*wiring, ","), *list); err != nil {
		fmt.Fprintln(os.Stderr, "leaves:", err)
		os.Exit(1)
	}
}

func run(features, wiring []string, list bool) error {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		return err
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check(".", fset, files, info); err != nil {
		return err
	}
	uses := map[string][]string{} // feature file: "core.go:12: name"
	for id, obj := range info.Uses {
		if !obj.Pos().IsValid() {
			continue
		}
		at, decl := fset.Position(id.Pos()), fset.Position(obj.Pos())
		if decl.Filename == "" || slices.Contains(features, at.Filename) || slices.Contains(wiring, at.Filename) ||
			!slices.Contains(features, decl.Filename) {
			continue
		}
		uses[decl.Filename] = append(uses[decl.Filename], fmt.Sprintf("%s:%d: %s", at.Filename, at.Line, id.Name))
	}
	for _, f := range features {
		u := uses[f]
		slices.Sort(u)
		verdict := "a leaf"
		if len(u) > 0 {
			verdict = fmt.Sprintf("used by the core %d times", len(u))
		}
		fmt.Printf("%-20s %s\n", f, verdict)
		for _, line := range u {
			if list {
				fmt.Println("    " + line)
			}
		}
	}
	return nil
}
