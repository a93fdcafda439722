package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dedupe-proxy/dedupe-proxy/internal/inject"
)

// goreleaser is the part of GoReleaser's configuration .goreleaser.yaml
// uses, decoded strictly: a key this test does not know (a typo, or one
// added without a look here) fails it. `goreleaser check` is the tool's
// own check; make release-check runs it where goreleaser is installed.
type goreleaser struct {
	Version     int    `yaml:"version"`
	ProjectName string `yaml:"project_name"`
	Builds      []struct {
		ID           string   `yaml:"id"`
		Main         string   `yaml:"main"`
		Binary       string   `yaml:"binary"`
		Env          []string `yaml:"env"`
		Goos         []string `yaml:"goos"`
		Goarch       []string `yaml:"goarch"`
		Flags        []string `yaml:"flags"`
		Ldflags      []string `yaml:"ldflags"`
		ModTimestamp string   `yaml:"mod_timestamp"`
	} `yaml:"builds"`
	Archives []struct {
		ID           string   `yaml:"id"`
		IDs          []string `yaml:"ids"`
		Formats      []string `yaml:"formats"`
		NameTemplate string   `yaml:"name_template"`
		Files        []string `yaml:"files"`
	} `yaml:"archives"`
	Checksum struct {
		NameTemplate string `yaml:"name_template"`
	} `yaml:"checksum"`
	Dockers []struct {
		ID                 string   `yaml:"id"`
		IDs                []string `yaml:"ids"`
		Goos               string   `yaml:"goos"`
		Goarch             string   `yaml:"goarch"`
		Dockerfile         string   `yaml:"dockerfile"`
		Use                string   `yaml:"use"`
		ImageTemplates     []string `yaml:"image_templates"`
		BuildFlagTemplates []string `yaml:"build_flag_templates"`
		ExtraFiles         []string `yaml:"extra_files"`
	} `yaml:"dockers"`
	DockerManifests []struct {
		NameTemplate   string   `yaml:"name_template"`
		ImageTemplates []string `yaml:"image_templates"`
	} `yaml:"docker_manifests"`
	Changelog struct {
		Disable bool `yaml:"disable"`
	} `yaml:"changelog"`
	Release struct {
		GitHub struct {
			Owner string `yaml:"owner"`
			Name  string `yaml:"name"`
		} `yaml:"github"`
		Draft bool `yaml:"draft"`
	} `yaml:"release"`
	Snapshot struct {
		VersionTemplate string `yaml:"version_template"`
	} `yaml:"snapshot"`
}

var root = filepath.Join("..", "..")

func readRoot(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// makeVar is the value of a `NAME := value` or `NAME ?= value` line.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` [:?]= (.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile has no %s", name)
	}
	return m[1]
}

// The release builds what `make build` builds: the same command, flags
// and -X values, for linux and darwin on amd64 and arm64, and the image
// inject and the chart write, from the Dockerfile.
func TestReleaseConfig(t *testing.T) {
	var g goreleaser
	dec := yaml.NewDecoder(strings.NewReader(readRoot(t, ".goreleaser.yaml")))
	dec.KnownFields(true)
	if err := dec.Decode(&g); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if g.Version != 2 || g.ProjectName != "dedupe-proxy" || len(g.Builds) != 1 {
		t.Fatalf("want GoReleaser v2, project dedupe-proxy, one build: %+v", g)
	}

	b := g.Builds[0]
	makefile := readRoot(t, "Makefile")
	build := regexp.MustCompile(`(?m)^build:.*\n\t(.*)$`).FindStringSubmatch(makefile)
	if build == nil {
		t.Fatal("Makefile has no build recipe")
	}
	// CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/dedupe-proxy
	if !strings.HasPrefix(build[1], "CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' ") || !strings.HasSuffix(build[1], " ./cmd/dedupe-proxy") {
		t.Fatalf("make build is %q: update this test and .goreleaser.yaml together", build[1])
	}
	if b.Main != "./cmd/dedupe-proxy" || b.Binary != "dedupe-proxy" || !slices.Equal(b.Env, []string{"CGO_ENABLED=0"}) || !slices.Equal(b.Flags, []string{"-trimpath"}) {
		t.Errorf("build differs from make build: %+v", b)
	}
	if !slices.Equal(b.Goos, []string{"linux", "darwin"}) || !slices.Equal(b.Goarch, []string{"amd64", "arm64"}) {
		t.Errorf("build targets %v × %v, want linux, darwin × amd64, arm64", b.Goos, b.Goarch)
	}
	want := strings.NewReplacer("$(VERSION)", "{{ .Summary }}", "$(REVISION)", "{{ .FullCommit }}").Replace(makeVar(t, makefile, "LDFLAGS"))
	if len(b.Ldflags) != 1 || b.Ldflags[0] != want {
		t.Errorf("ldflags %q, want the Makefile's: %q", b.Ldflags, want)
	}
	// .Summary is what the Makefile's VERSION is.
	if v := makeVar(t, makefile, "VERSION"); !strings.Contains(v, "git describe --tags --always --dirty") {
		t.Errorf("Makefile VERSION is %q, no longer GoReleaser's .Summary", v)
	}
	if v := makeVar(t, makefile, "REVISION"); !strings.Contains(v, "git rev-parse HEAD") {
		t.Errorf("Makefile REVISION is %q, no longer GoReleaser's .FullCommit", v)
	}

	if len(g.Archives) != 1 || !slices.Equal(g.Archives[0].IDs, []string{b.ID}) {
		t.Fatalf("archives: %+v", g.Archives)
	}
	for _, f := range g.Archives[0].Files {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("archive file %s: %v", f, err)
		}
	}

	// The image: the Dockerfile, for both Linux architectures, named as
	// inject and the chart name it (DefaultRepository:<chart appVersion>,
	// which {{ .Version }} is for tag v<appVersion>).
	dockerignore := readRoot(t, ".dockerignore")
	var arches []string
	for _, d := range g.Dockers {
		arches = append(arches, d.Goarch)
		if d.Dockerfile != "Dockerfile" || d.Goos != "linux" || !slices.Equal(d.IDs, []string{b.ID}) || d.Use != "buildx" {
			t.Errorf("docker %s: %+v", d.ID, d)
		}
		if !slices.Equal(d.ImageTemplates, []string{inject.DefaultRepository + ":{{ .Version }}-" + d.Goarch}) {
			t.Errorf("docker %s images %v", d.ID, d.ImageTemplates)
		}
		for _, f := range []string{"--platform=linux/" + d.Goarch, "--build-arg=VERSION={{ .Summary }}", "--build-arg=REVISION={{ .FullCommit }}"} {
			if !slices.Contains(d.BuildFlagTemplates, f) {
				t.Errorf("docker %s lacks %s", d.ID, f)
			}
		}
		// The Dockerfile runs make build on the sources: the context
		// holds what .dockerignore says that needs.
		for _, f := range []string{"go.mod", "go.sum", "Makefile", "cmd", "internal", "tools"} {
			if !slices.Contains(d.ExtraFiles, f) {
				t.Errorf("docker %s: extra_files lack %s", d.ID, f)
			}
		}
		for _, f := range d.ExtraFiles {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Errorf("docker %s extra file %s: %v", d.ID, f, err)
			}
			if slices.Contains(strings.Fields(dockerignore), f) {
				t.Errorf("docker %s: extra file %s is in .dockerignore", d.ID, f)
			}
		}
	}
	if !slices.Equal(arches, []string{"amd64", "arm64"}) {
		t.Errorf("images for %v, want amd64 and arm64", arches)
	}
	if len(g.DockerManifests) != 1 || g.DockerManifests[0].NameTemplate != inject.DefaultRepository+":{{ .Version }}" ||
		!slices.Equal(g.DockerManifests[0].ImageTemplates, []string{g.Dockers[0].ImageTemplates[0], g.Dockers[1].ImageTemplates[0]}) {
		t.Errorf("docker_manifests: %+v", g.DockerManifests)
	}
	dockerfile := readRoot(t, "Dockerfile")
	for _, want := range []string{"ARG VERSION=", "ARG REVISION=", "RUN make build VERSION=$VERSION REVISION=$REVISION"} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("the Dockerfile lacks %q: the build args would not reach make build", want)
		}
	}
	if inject.DefaultImage != inject.DefaultRepository+":"+chartAppVersion(t) {
		t.Errorf("inject.DefaultImage %s is not the chart's %s:%s", inject.DefaultImage, inject.DefaultRepository, chartAppVersion(t))
	}
}

func chartAppVersion(t *testing.T) string {
	m := regexp.MustCompile(`(?m)^appVersion: "?([^"\n]+)"?$`).FindStringSubmatch(readRoot(t, filepath.Join("helm", "dedupe-proxy", "Chart.yaml")))
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return m[1]
}

// `go install github.com/dedupe-proxy/dedupe-proxy/cmd/dedupe-proxy@latest`
// works: the module path is the repository's, this directory is its
// cmd/dedupe-proxy, and go.mod has no replace or exclude directive (go
// install pkg@version refuses a module that has one).
func TestGoInstallPath(t *testing.T) {
	gomod := readRoot(t, "go.mod")
	if !strings.HasPrefix(gomod, "module github.com/dedupe-proxy/dedupe-proxy\n") {
		t.Errorf("go.mod module line: %q", strings.SplitN(gomod, "\n", 2)[0])
	}
	for _, l := range strings.Split(gomod, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "replace" || f[0] == "exclude") {
			t.Errorf("go.mod has %q: go install ...@latest would refuse the module", l)
		}
	}
	wd, _ := os.Getwd()
	if filepath.Base(wd) != "dedupe-proxy" || filepath.Base(filepath.Dir(wd)) != "cmd" {
		t.Errorf("the command is not in cmd/dedupe-proxy: %s", wd)
	}
	main, _ := os.ReadFile("main.go")
	if !bytes.Contains(main, []byte("\npackage main\n")) {
		t.Error("cmd/dedupe-proxy is not package main")
	}
}

// `go install github.com/dedupe-proxy/dedupe-proxy/cmd/dedupe-proxy@<commit>`
// (what the README offers while no version is tagged) and `@latest`, for
// real: the tracked files are served as a module version from a
// file-based module proxy placed before the configured one (which serves
// the dependencies), as a module proxy answers a commit (its .info names
// the pseudo-version) and latest, and the installed binary reports that
// version. It builds the whole command, so it runs only when asked: make
// release-check sets DPTEST_GO_INSTALL=1.
func TestGoInstallLatest(t *testing.T) {
	if os.Getenv("DPTEST_GO_INSTALL") != "1" {
		t.Skip("set DPTEST_GO_INSTALL=1 (make release-check does)")
	}
	const module, commit = "github.com/dedupe-proxy/dedupe-proxy", "0123456789abcdef0123456789abcdef01234567"
	version := "v0.0.0-20261204000000-" + commit[:12]
	dir := t.TempDir()
	at := filepath.Join(dir, "proxy", module, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod := readRoot(t, "go.mod")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(at, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	info := `{"Version":"` + version + `","Time":"2026-12-04T00:00:00Z"}`
	write("list", "") // no tagged version: latest is the proxy's @latest
	write(version+".info", info)
	write(commit[:12]+".info", info)
	write(filepath.Join("..", "@latest"), info)
	write(version+".mod", gomod)
	writeModuleZip(t, filepath.Join(at, version+".zip"), module+"@"+version)

	env, err := exec.Command("go", "env", "GOPROXY", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	goproxy, modcache, _ := strings.Cut(strings.TrimSpace(string(env)), "\n")
	for _, query := range []string{commit[:12], "latest"} {
		bin := filepath.Join(dir, "bin-"+query)
		cmd := exec.Command("go", "install", module+"/cmd/dedupe-proxy@"+query)
		cmd.Dir = dir // outside the module, as a user runs it
		cmd.Env = append(os.Environ(),
			"GOBIN="+bin,
			// A module cache of its own, so this made-up version never
			// lands in the real one; the real one's downloads serve the
			// dependencies, the configured proxy whatever it lacks.
			"GOMODCACHE="+filepath.Join(dir, "modcache"),
			"GOPROXY=file://"+filepath.ToSlash(filepath.Join(dir, "proxy"))+",file://"+filepath.ToSlash(filepath.Join(modcache, "cache", "download"))+","+goproxy,
			"GONOSUMDB="+module,                      // the checksum database cannot know this version; the dependencies are still checked
			"GOFLAGS=-mod=mod -modcacherw -trimpath", // -trimpath: the build cache serves what an earlier run compiled from another module cache
		)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go install ...@%s: %v\n%s", query, err, out)
		}
		out, err := exec.Command(filepath.Join(bin, "dedupe-proxy"), "version", "-o", "json").Output()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), `"version":"`+version+`"`) {
			t.Errorf("@%s: the installed binary says %s, want version %s", query, out, version)
		}
	}
}

// make release, for the platform the test runs on (one build, to stay
// cheap; the target's default is linux and darwin × amd64 and arm64):
// an archive named as GoReleaser names it with the binary and the files
// .goreleaser.yaml packs, the packaged chart, and SHA256SUMS that match
// both. The binary runs and reports the version it was built as. Runs
// when asked: make release-check sets DPTEST_RELEASE=1.
func TestMakeRelease(t *testing.T) {
	if os.Getenv("DPTEST_RELEASE") != "1" {
		t.Skip("set DPTEST_RELEASE=1 (make release-check does)")
	}
	dist := t.TempDir()
	goos, goarch := runtime.GOOS, runtime.GOARCH
	cmd := exec.Command("make", "--no-print-directory", "release", "DIST="+dist, "VERSION=v9.8.7-test", "RELEASE_PLATFORMS="+goos+"/"+goarch)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	archive := "dedupe-proxy_9.8.7-test_" + goos + "_" + goarch + ".tar.gz"
	chart := "dedupe-proxy-" + chartVersion(t) + ".tgz"
	sums := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(must(os.ReadFile(filepath.Join(dist, "SHA256SUMS"))))), "\n") {
		sum, name, _ := strings.Cut(l, "  ")
		sums[name] = sum
	}
	if len(sums) != 2 || sums[archive] == "" || sums[chart] == "" {
		t.Fatalf("SHA256SUMS lists %v, want %s and %s", sums, archive, chart)
	}
	for name, sum := range sums {
		h := sha256.Sum256(must(os.ReadFile(filepath.Join(dist, name))))
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s: SHA256SUMS says %s, the file is %x", name, sum, h)
		}
	}

	files := untar(t, filepath.Join(dist, archive))
	dir := strings.TrimSuffix(archive, ".tar.gz") + "/"
	for _, f := range []string{"dedupe-proxy", "LICENSE", "README.md", "CHANGELOG.md", "config.example.yaml"} {
		if _, ok := files[dir+f]; !ok {
			t.Errorf("%s lacks %s (has %v)", archive, dir+f, slices.Sorted(maps.Keys(files)))
		}
	}
	bin := filepath.Join(t.TempDir(), "dedupe-proxy")
	if err := os.WriteFile(bin, files[dir+"dedupe-proxy"], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil || !strings.Contains(string(out), `"version":"v9.8.7-test"`) {
		t.Errorf("the released binary: %v, %s; want version v9.8.7-test", err, out)
	}
	if c, ok := untar(t, filepath.Join(dist, chart))["dedupe-proxy/Chart.yaml"]; !ok || !bytes.Contains(c, []byte("version: "+chartVersion(t))) {
		t.Errorf("%s has no dedupe-proxy/Chart.yaml of version %s", chart, chartVersion(t))
	}
}

// make install PREFIX=DIR puts the built command in DIR/bin.
func TestMakeInstall(t *testing.T) {
	if os.Getenv("DPTEST_RELEASE") != "1" {
		t.Skip("set DPTEST_RELEASE=1 (make release-check does)")
	}
	prefix := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "install", "PREFIX="+prefix)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(prefix, "bin", "dedupe-proxy"), "version").Output(); err != nil || !strings.HasPrefix(string(out), "dedupe-proxy ") {
		t.Errorf("installed dedupe-proxy version: %v, %s", err, out)
	}
}

// The README's install paths are the ones the tests above run: no
// `@latest` while no version is tagged, and it says what is not
// published.
func TestReadmeInstallPaths(t *testing.T) {
	readme := readRoot(t, "README.md")
	i := strings.Index(readme, "\n## Install\n")
	if i < 0 {
		t.Fatal("README has no Install section")
	}
	install := readme[i:]
	install = install[:strings.Index(install[1:], "\n## ")+1]
	for _, want := range []string{"/cmd/dedupe-proxy@<commit>", "make install", "make release", "No version is tagged", "Nothing is published yet"} {
		if !strings.Contains(install, want) {
			t.Errorf("README's Install section lacks %q", want)
		}
	}
	if out, err := exec.Command("git", "-C", root, "tag", "--list", "v*").Output(); err == nil && len(bytes.TrimSpace(out)) == 0 && regexp.MustCompile(`go install \S*@latest`).MatchString(install) {
		t.Error("README offers go install ...@latest, but no version is tagged")
	}
}

func chartVersion(t *testing.T) string {
	m := regexp.MustCompile(`(?m)^version: "?([^"\n]+)"?$`).FindStringSubmatch(readRoot(t, filepath.Join("helm", "dedupe-proxy", "Chart.yaml")))
	if m == nil {
		t.Fatal("Chart.yaml has no version")
	}
	return m[1]
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// untar reads a .tar.gz: the regular files by name.
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			files[h.Name] = must(io.ReadAll(tr))
		}
	}
}

// writeModuleZip zips the module's tracked files as the go command
// expects a module version: every path under prefix/, nested modules
// (helm/charttest) left out.
func writeModuleZip(t *testing.T, path, prefix string) {
	t.Helper()
	ls, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Split(strings.TrimSpace(string(ls)), "\n")
	var nested []string
	for _, f := range files {
		if strings.HasSuffix(f, "/go.mod") {
			nested = append(nested, strings.TrimSuffix(f, "go.mod"))
		}
	}
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	z := zip.NewWriter(out)
	for _, f := range files {
		if slices.ContainsFunc(nested, func(n string) bool { return strings.HasPrefix(f, n) }) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		w, err := z.Create(prefix + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
}
