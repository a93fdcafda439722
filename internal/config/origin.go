package config

import (
	"fmt"
	"strings"
)

// Origins says where each setting that is not a default came from, by
// its path as errors print it ("app.url", "sources[0].rabbitmq.queue"):
// OriginFile, or the name of the environment variable that set it.
type Origins map[string]string

// OriginFile marks a setting read from the config file.
const OriginFile = "file"

// Of describes where path's value came from: "default", "file" or
// "env DEDUPE_PROXY_…".
func (o Origins) Of(path string) string {
	switch v, ok := o[path]; {
	case !ok:
		return "default"
	case v == OriginFile:
		return "file"
	default:
		return "env " + v
	}
}

// fromFile records every leaf of the file's settings. A list of
// mappings (sources) is entered item by item; any other list is a leaf.
func (o Origins) fromFile(m map[string]any, prefix string) {
	for k, v := range m {
		p := joinPath(prefix, k)
		switch x := v.(type) {
		case map[string]any:
			o.fromFile(x, p)
		case []any:
			o[p] = OriginFile
			for i, item := range x {
				if sub, ok := item.(map[string]any); ok {
					o.fromFile(sub, fmt.Sprintf("%s[%d]", p, i))
				}
			}
		default:
			o[p] = OriginFile
		}
	}
}

// nameVariables adds the environment variable to each error about a
// setting it set: the file shows a different value, or none, and the
// operator would otherwise look there.
func (o Origins) nameVariables(errs []error) []error {
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		path, _, ok := strings.Cut(e.Error(), ": ")
		if !ok {
			continue
		}
		if name := o.variableFor(path); name != "" {
			out[i] = &envError{err: e, path: path, name: name}
		}
	}
	return out
}

// variableFor is the variable that set path, or one of its parents
// (a list: seenset.redis.addrs[1]).
func (o Origins) variableFor(path string) string {
	for p := path; p != ""; {
		if v, ok := o[p]; ok && v != OriginFile {
			return v
		}
		cut := strings.LastIndexAny(p, ".[")
		if cut < 0 {
			break
		}
		p = p[:cut]
	}
	return ""
}

type envError struct {
	err        error
	path, name string
}

func (e *envError) Error() string {
	return e.path + " (from " + e.name + "):" + strings.TrimPrefix(e.err.Error(), e.path+":")
}

func (e *envError) Unwrap() error { return e.err }
