package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlLines maps each setting of the file at path, by its path as errors
// print it ("app.url", "sources[0].rabbitmq.queue"), to the line it is
// on, so that an error points the operator at the line to fix. A file
// that does not parse gives none (viper reports the syntax error itself).
func yamlLines(path string) map[string]int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	lines := map[string]int{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := joinPath(prefix, strings.ToLower(k.Value))
				lines[p] = k.Line
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				p := fmt.Sprintf("%s[%d]", prefix, i)
				lines[p] = item.Line
				walk(item, p)
			}
		}
	}
	walk(doc.Content[0], "")
	return lines
}

// lineError is an error about a setting read from the file, with its line.
type lineError struct {
	err  error
	line int
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// withLines prefixes each error about a setting from the file (or, for a
// setting the file leaves out, its nearest parent in the file) with that
// line. Errors about environment variables keep theirs.
func withLines(errs []error, lines map[string]int) []error {
	if len(lines) == 0 {
		return errs
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		var env *envError
		if errors.As(e, &env) {
			continue
		}
		path, _, ok := strings.Cut(e.Error(), ": ")
		if !ok {
			continue
		}
		for p := path; p != ""; {
			if l, ok := lines[p]; ok {
				out[i] = &lineError{err: e, line: l}
				break
			}
			cut := strings.LastIndexAny(p, ".[")
			if cut < 0 {
				break
			}
			p = p[:cut]
		}
	}
	return out
}
