package model

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The packages whose functions the model's transition table may name,
// by the name the table uses.
var codePackages = map[string]string{
	"claim":    "../internal/claim",
	"pipeline": "../internal/pipeline",
	"forward":  "../internal/forward",
	"seenset":  "../internal/seenset",
	"webhook":  "../internal/webhook",
}

// table is what claim.pml's header says about the code.
type table struct {
	steps      map[string][]string // T_* → functions ("env" for the world)
	actions    map[string][]string // A_* → claim.Action values
	notModeled map[string]string   // claim.X → why not
	mtypes     []string            // the model's mtype names
	body       string              // the model without its header comment
}

var (
	entryRE = regexp.MustCompile(`^\s*\*\s+((?:T|A)_[A-Z_]+)\s+(.+)$`)
	notRE   = regexp.MustCompile(`^\s*\*\s+(claim\.[A-Za-z.]+)\s+(.+)$`)
	mtypeRE = regexp.MustCompile(`(?s)\bmtype\s*=\s*\{([^}]*)\}`)
)

func parseTable(src string) (*table, error) {
	end := strings.Index(src, "*/")
	if !strings.HasPrefix(strings.TrimSpace(src), "/*") || end < 0 {
		return nil, fmt.Errorf("the model does not start with its header comment")
	}
	header, body := src[:end], src[end+2:]
	t := &table{steps: map[string][]string{}, actions: map[string][]string{}, notModeled: map[string]string{}, body: body}
	section := ""
	for line := range strings.SplitSeq(header, "\n") {
		switch {
		case strings.Contains(line, "TRANSITIONS:"):
			section = "T"
			continue
		case strings.Contains(line, "ACTIONS:"):
			section = "A"
			continue
		case strings.Contains(line, "NOT MODELLED:"):
			section = "N"
			continue
		}
		switch section {
		case "T", "A":
			m := entryRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if !strings.HasPrefix(m[1], section+"_") {
				return nil, fmt.Errorf("%s listed under the wrong heading", m[1])
			}
			into := t.steps
			if section == "A" {
				into = t.actions
			}
			if _, dup := into[m[1]]; dup {
				return nil, fmt.Errorf("%s listed twice", m[1])
			}
			into[m[1]] = strings.Fields(m[2])
		case "N":
			if m := notRE.FindStringSubmatch(line); m != nil {
				t.notModeled[m[1]] = strings.TrimSpace(m[2])
			}
		}
	}
	m := mtypeRE.FindStringSubmatch(body)
	if m == nil {
		return nil, fmt.Errorf("no mtype declaration in the model")
	}
	for name := range strings.SplitSeq(m[1], ",") {
		if name = strings.TrimSpace(name); name != "" {
			t.mtypes = append(t.mtypes, name)
		}
	}
	if len(t.steps) == 0 || len(t.actions) == 0 {
		return nil, fmt.Errorf("the header lists no transitions or no actions")
	}
	return t, nil
}

// codeIndex is every name the table may refer to: "pkg.Func",
// "pkg.Type.Method" (interface methods too) and "pkg.Const".
type codeIndex struct {
	names map[string]bool
	// protocolSteps are the parts of internal/claim every one of which the
	// model must name or list as not modelled: the exported methods of
	// every exported type, the exported functions and the Action values.
	protocolSteps []string
}

func indexCode(dirs map[string]string) (*codeIndex, error) {
	ix := &codeIndex{names: map[string]bool{}}
	fset := token.NewFileSet()
	for pkg, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return nil, err
		}
		n := 0
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			n++
			ix.addFile(pkg, f)
		}
		if n == 0 {
			return nil, fmt.Errorf("no Go files in %s", dir)
		}
	}
	sort.Strings(ix.protocolSteps)
	return ix, nil
}

func (ix *codeIndex) addFile(pkg string, f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			name := pkg + "." + d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = pkg + "." + recvName(d.Recv.List[0].Type) + "." + d.Name.Name
			}
			ix.names[name] = true
			if pkg == "claim" && d.Name.IsExported() && (d.Recv == nil || ast.IsExported(recvName(d.Recv.List[0].Type))) {
				ix.protocolSteps = append(ix.protocolSteps, name)
			}
		case *ast.GenDecl:
			typ := ""
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					ix.names[pkg+"."+s.Name.Name] = true
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, n := range m.Names {
								ix.names[pkg+"."+s.Name.Name+"."+n.Name] = true
							}
						}
					}
				case *ast.ValueSpec:
					if d.Tok != token.CONST {
						continue
					}
					// In a const group a spec without type or value has
					// the type of the one before it (iota).
					if id, ok := s.Type.(*ast.Ident); ok {
						typ = id.Name
					} else if s.Type != nil || len(s.Values) > 0 {
						typ = ""
					}
					for _, n := range s.Names {
						ix.names[pkg+"."+n.Name] = true
						if pkg == "claim" && typ == "Action" && n.IsExported() {
							ix.protocolSteps = append(ix.protocolSteps, pkg+"."+n.Name)
						}
					}
				}
			}
		}
	}
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// check returns every way the model and the code disagree.
func check(t *table, ix *codeIndex) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	listed := map[string]bool{}
	for name := range t.steps {
		listed[name] = true
	}
	for name := range t.actions {
		listed[name] = true
	}
	declared := map[string]bool{}
	for _, name := range t.mtypes {
		declared[name] = true
		if !listed[name] {
			add("%s is a step of the model but not in its transition table", name)
		}
	}
	for name := range listed {
		if !declared[name] {
			add("%s is in the transition table but not a step of the model (mtype)", name)
		}
	}

	// Each step is taken somewhere in the model, each action decided.
	for name := range t.steps {
		if !regexp.MustCompile(`\b(STEP|ENV)\(` + name + `\)`).MatchString(t.body) {
			add("%s is never taken in the model (no STEP(%s) or ENV(%s))", name, name, name)
		}
	}
	for name := range t.actions {
		if !regexp.MustCompile(`\bact = ` + name + `\b`).MatchString(t.body) {
			add("%s is never decided in the model (no act = %s)", name, name)
		}
	}

	// Every function named exists in the code.
	named := map[string]bool{}
	for name, fns := range t.steps {
		if len(fns) == 0 {
			add("%s names no function", name)
		}
		for _, fn := range fns {
			if fn == "env" {
				continue
			}
			named[fn] = true
			if !ix.names[fn] {
				add("%s names %s, which is not in the code", name, fn)
			}
		}
	}
	for name, vals := range t.actions {
		if len(vals) != 1 {
			add("%s must name one claim.Action value, names %v", name, vals)
		}
		for _, v := range vals {
			named[v] = true
			if !ix.names[v] {
				add("%s names %s, which is not in the code", name, v)
			}
		}
	}
	for fn := range t.notModeled {
		if !ix.names[fn] {
			add("NOT MODELLED lists %s, which is not in the code", fn)
		}
		if named[fn] {
			add("%s is both a step of the model and NOT MODELLED", fn)
		}
	}

	// Every step of internal/claim is in the model, or said not to be.
	for _, fn := range ix.protocolSteps {
		if !named[fn] && t.notModeled[fn] == "" {
			add("%s is part of internal/claim but neither named by a transition of the model nor listed as NOT MODELLED", fn)
		}
	}
	sort.Strings(problems)
	return problems
}

func loadModel(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("claim.pml")
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func TestTransitionTableMatchesCode(t *testing.T) {
	tab, err := parseTable(loadModel(t))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := indexCode(codePackages)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range check(tab, ix) {
		t.Error(p)
	}
	// The index must have found what the table is checked against.
	for _, want := range []string{"claim.Session.Take", "claim.Decide", "claim.Keep", "claim.Hold.tick", "seenset.Store.Commit", "webhook.Handler.settle"} {
		if !ix.names[want] {
			t.Errorf("the code index lacks %s", want)
		}
	}
	if len(ix.protocolSteps) < 10 {
		t.Errorf("found only %d steps in internal/claim: %v", len(ix.protocolSteps), ix.protocolSteps)
	}
}

// The check catches each kind of drift: a renamed function, a new step of
// the protocol, a new Action, a step the model no longer takes.
func TestTransitionTableCatchesDrift(t *testing.T) {
	src := loadModel(t)
	ix, err := indexCode(codePackages)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, want string
		edit       func(src string, ix *codeIndex) (string, *codeIndex)
	}{
		{"renamed function", "names claim.Session.Forwardeds, which is not in the code", func(s string, ix *codeIndex) (string, *codeIndex) {
			return strings.Replace(s, "claim.Session.Forwarded ", "claim.Session.Forwardeds ", 1), ix
		}},
		{"new protocol method", "claim.Protocol.Abandon is part of internal/claim", func(s string, ix *codeIndex) (string, *codeIndex) {
			return s, withStep(ix, "claim.Protocol.Abandon")
		}},
		{"new action", "claim.Forget is part of internal/claim", func(s string, ix *codeIndex) (string, *codeIndex) {
			return s, withStep(ix, "claim.Forget")
		}},
		{"step left out of the table", "T_KEEP is a step of the model but not in its transition table", func(s string, ix *codeIndex) (string, *codeIndex) {
			return regexp.MustCompile(`(?m)^ \*   T_KEEP .*\n`).ReplaceAllString(s, ""), ix
		}},
		{"step never taken", "T_RELEASE is never taken in the model", func(s string, ix *codeIndex) (string, *codeIndex) {
			return strings.ReplaceAll(s, "STEP(T_RELEASE)", "skip"), ix
		}},
		{"action never decided", "A_KEEP is never decided in the model", func(s string, ix *codeIndex) (string, *codeIndex) {
			return strings.ReplaceAll(s, "act = A_KEEP", "act = A_RELEASE"), ix
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, edited := c.edit(src, ix)
			if s == src && edited == ix {
				t.Fatal("the edit changed nothing")
			}
			tab, err := parseTable(s)
			if err != nil {
				t.Fatal(err)
			}
			problems := check(tab, edited)
			for _, p := range problems {
				if strings.Contains(p, c.want) {
					return
				}
			}
			t.Errorf("no problem reported containing %q; got %q", c.want, problems)
		})
	}
}

func withStep(ix *codeIndex, name string) *codeIndex {
	c := &codeIndex{names: map[string]bool{}, protocolSteps: append([]string{name}, ix.protocolSteps...)}
	for k, v := range ix.names {
		c.names[k] = v
	}
	c.names[name] = true
	return c
}
