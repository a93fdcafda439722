package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// pages lists the Markdown files whose links are checked, relative to the
// repository root: the README and every page under docs/.
func pages(fsys fs.FS) ([]string, error) {
	files := []string{"README.md"}
	more, err := fs.Glob(fsys, "docs/*.md")
	if err != nil {
		return nil, err
	}
	return append(files, more...), nil
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	// [text](target) and ![alt](target); the target ends at whitespace or ')'.
	link     = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag  = regexp.MustCompile(`<[^>]+>`)
)

// slug is GitHub's anchor for a heading's text: the rendered text in lower
// case, every character that is not a letter, a digit, a space, '-' or '_'
// removed, and each space turned into '-'.
func slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// lines yields the lines of a Markdown file outside fenced code blocks,
// with their 1-based numbers.
func lines(md string, f func(n int, line string)) {
	inFence := false
	for i, l := range strings.Split(md, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if !inFence {
			f(i+1, l)
		}
	}
}

// anchors are the heading anchors of a Markdown file as GitHub makes them:
// the second heading with one slug gets "-1", the third "-2", and so on.
func anchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	lines(md, func(_ int, l string) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			return
		}
		s := slug(strings.ReplaceAll(m[2], "`", ""))
		a := s
		if n := seen[s]; n > 0 {
			a = fmt.Sprintf("%s-%d", s, n)
		}
		seen[s]++
		out[a] = true
	})
	return out
}

// external reports a link target that leaves the repository (a URL).
func external(target string) bool {
	return strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:")
}

// check returns one line per relative link or anchor in files that does
// not resolve in fsys: a file or directory that does not exist, a path
// out of the repository, or an #anchor that is no heading of the target.
func check(fsys fs.FS, files []string) []string {
	var problems []string
	cache := map[string]map[string]bool{}
	anchorsOf := func(name string) (map[string]bool, error) {
		if a, ok := cache[name]; ok {
			return a, nil
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		cache[name] = anchors(string(b))
		return cache[name], nil
	}
	for _, file := range files {
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		lines(string(b), func(n int, l string) {
			l = inlineCode.ReplaceAllString(l, "")
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if external(target) {
					continue
				}
				where := fmt.Sprintf("%s:%d: %s", file, n, target)
				p, frag, _ := strings.Cut(target, "#")
				name := file
				if p != "" {
					name = path.Join(path.Dir(file), p)
					if name == ".." || strings.HasPrefix(name, "../") || path.IsAbs(p) {
						problems = append(problems, where+": leaves the repository")
						continue
					}
					if _, err := fs.Stat(fsys, name); err != nil {
						problems = append(problems, where+": no such file or directory")
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(name, ".md") {
					problems = append(problems, where+": an anchor into a file that is not Markdown")
					continue
				}
				a, err := anchorsOf(name)
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s: %v", where, err))
					continue
				}
				if !a[frag] {
					problems = append(problems, fmt.Sprintf("%s: %s has no heading with anchor #%s", where, name, frag))
				}
			}
		})
	}
	return problems
}

// TestLinks: every relative link and anchor in the README and docs/
// resolves in this checkout.
func TestLinks(t *testing.T) {
	fsys := os.DirFS("..")
	files, err := pages(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found only %v: is the test run from docs/?", files)
	}
	for _, p := range check(fsys, files) {
		t.Error(p)
	}
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"How it decides, per message", "how-it-decides-per-message"},
		{"The delivery contract, and its one crash window", "the-delivery-contract-and-its-one-crash-window"},
		{"When two requests for one key can reach the app at once", "when-two-requests-for-one-key-can-reach-the-app-at-once"},
		{"`mode: shared`: the parts injected workloads share", "mode-shared-the-parts-injected-workloads-share"},
		{"Replaying a message: the key API and `dedupe-proxy keys`", "replaying-a-message-the-key-api-and-dedupe-proxy-keys"},
		{"Redis: 2 plain commands per message, and what that did to Redis's CPU", "redis-2-plain-commands-per-message-and-what-that-did-to-rediss-cpu"},
		{"RabbitMQ duplicates held by this replica: requeues 504 → 0", "rabbitmq-duplicates-held-by-this-replica-requeues-504--0"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
		{"A [linked](x.md) heading", "a-linked-heading"},
		{"Überblick", "überblick"},
	} {
		if got := slug(strings.ReplaceAll(c.heading, "`", "")); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

// TestCheck: the checker finds each kind of broken link and passes the
// good ones, duplicate headings and links inside code included.
func TestCheck(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md":           {Data: []byte("# Top\n\n## Setup\n\n## Setup\n\n```sh\n# not a heading\n[no](missing-in-code.md)\n```\n")},
		"docs/a.md":           {Data: []byte("# A page\n\n## The `x` field\n")},
		"examples/go/main.go": {Data: []byte("package main\n")},
	}
	for _, c := range []struct {
		name, page string
		want       []string // substrings of the problems, one per problem; none: no problem
	}{
		{"good links", "[a](docs/a.md) [b](docs/a.md#a-page) [c](#setup) [d](#setup-1) [e](examples/go) [f](examples/go/main.go) [g](https://example.com/x#y)", nil},
		{"a link in inline code is not checked", "`[x](nowhere.md)`", nil},
		{"a missing file", "[x](docs/nowhere.md)", []string{"docs/nowhere.md: no such file"}},
		{"a missing anchor in this file", "[x](#install)", []string{"README.md has no heading with anchor #install"}},
		{"a missing anchor in another file", "[x](docs/a.md#the-y-field)", []string{"docs/a.md has no heading with anchor #the-y-field"}},
		{"a duplicate heading counted once too often", "[x](#setup-2)", []string{"#setup-2"}},
		{"the heading code's anchor", "[x](docs/a.md#the-x-field)", nil},
		{"a header-inside-code anchor", "[x](#not-a-heading)", []string{"#not-a-heading"}},
		{"out of the repository", "[x](../other/README.md)", []string{"leaves the repository"}},
		{"an anchor into Go code", "[x](examples/go/main.go#L1)", []string{"not Markdown"}},
		{"two broken on one line", "[x](a.md) and [y](#nope)", []string{"a.md: no such file", "#nope"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := fstest.MapFS{}
			for k, v := range fsys {
				m[k] = v
			}
			m["README.md"] = &fstest.MapFile{Data: append(append([]byte{}, fsys["README.md"].Data...), []byte("\n"+c.page+"\n")...)}
			got := check(m, []string{"README.md"})
			sort.Strings(got)
			if len(got) != len(c.want) {
				t.Fatalf("problems %q, want %d matching %q", got, len(c.want), c.want)
			}
			for _, w := range c.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("problems %q, want one containing %q", got, w)
				}
			}
		})
	}
}
