package inject

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ManifestExts are the files ReadManifests takes from a directory, as
// kubectl and linkerd inject do.
var ManifestExts = []string{".yaml", ".yml", ".json"}

// ReadManifests returns the manifests at path: a file as it is, or the
// *.yaml, *.yml and *.json files of a directory (not its subdirectories),
// in name order, joined into one stream with "---" lines. A directory
// without one is an error: injecting nothing would look like success.
func ReadManifests(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return os.ReadFile(path)
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	n := 0
	for _, e := range entries {
		if e.IsDir() || !slices.Contains(ManifestExts, strings.ToLower(filepath.Ext(e.Name()))) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, err
		}
		if n > 0 {
			out.WriteString("---\n")
		}
		out.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			out.WriteByte('\n')
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no %s files", path, "*"+strings.Join(ManifestExts, ", *"))
	}
	return out.Bytes(), nil
}
