package inject

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.yaml from the current output")

// TestGolden injects every testdata/*.in.yaml and compares with its
// .out.yaml (helm/charttest decodes those strictly into the Kubernetes
// types); a second run over the output must change nothing.
func TestGolden(t *testing.T) {
	ins, _ := filepath.Glob("testdata/*.in.yaml")
	if len(ins) < 9 {
		t.Fatalf("want the golden inputs of every kind, found %d", len(ins))
	}
	for _, in := range ins {
		t.Run(filepath.Base(in), func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := Stream(src, Options{})
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s (go test -update rewrites it):\n%s", golden, got)
			}
			again, _, err := Stream(got, Options{})
			if err != nil {
				t.Fatalf("second injection: %v", err)
			}
			if !bytes.Equal(again, got) {
				t.Errorf("not idempotent: a second injection changed the output:\n%s", again)
			}
		})
	}
}

// TestOtherDocumentsByteForByte: every document that is not injected
// comes out exactly as it went in, comments and spacing included.
func TestOtherDocumentsByteForByte(t *testing.T) {
	src, err := os.ReadFile("testdata/untouched.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, res, err := Stream(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) || len(res.Injected) != 0 {
		t.Errorf("injected %v; output differs from input:\n%s", res.Injected, got)
	}
	src, err = os.ReadFile("testdata/deployment.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, res, err = Stream(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Injected, ",") != "Deployment/shop/orders-worker" || res.Documents != 4 {
		t.Errorf("result %+v", res)
	}
	docs := strings.Split(string(src), "---\n")
	for _, i := range []int{0, 2, 3} { // the ConfigMap, Service and ServiceAccount
		if !strings.Contains(string(got), docs[i]) {
			t.Errorf("document %d changed; want it verbatim:\n%s", i+1, docs[i])
		}
	}
}

func TestImageOption(t *testing.T) {
	src, _ := os.ReadFile("testdata/pod.in.yaml")
	got, _, err := Stream(src, Options{Image: "registry.example.com/dedupe-proxy:v9"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "image: registry.example.com/dedupe-proxy:v9\n") {
		t.Errorf("Options.Image not used:\n%s", got)
	}
	// The annotation wins over the option.
	src, _ = os.ReadFile("testdata/statefulset.in.yaml")
	got, _, _ = Stream(src, Options{Image: "registry.example.com/dedupe-proxy:v9"})
	if !strings.Contains(string(got), "image: registry.example.com/dedupe-proxy:v0.1.0\n") {
		t.Errorf("annotation image not used:\n%s", got)
	}
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: orders
spec:
  selector: {matchLabels: {app: o}}
  template:
    metadata:
      labels: {app: o}
      annotations:
ANNOTATIONS
    spec:
      containers:
        - name: app
          image: app:1
          ports: [{name: http, containerPort: 8080}]
`

func withAnnotations(a ...string) string {
	return strings.Replace(deployment, "ANNOTATIONS", "        "+strings.Join(a, "\n        "), 1)
}

// TestErrors: a bad request names the workload and the annotation, and
// nothing is written.
func TestErrors(t *testing.T) {
	inject := `dedupe-proxy.io/inject: "true"`
	config := `dedupe-proxy.io/config: orders-proxy`
	for _, tc := range []struct{ in, want string }{
		{withAnnotations(`dedupe-proxy.io/inject: "yes"`), `Deployment/orders: spec.template.metadata.annotations: annotation dedupe-proxy.io/inject: must be "true" or "false", got "yes"`},
		{withAnnotations(`dedupe-proxy.io/inject: true`, config), `annotation dedupe-proxy.io/inject: must be the string "true" or "false" (quoted`},
		{withAnnotations(inject, `dedupe-proxy.io/config: ""`), `Deployment/orders: annotation dedupe-proxy.io/config: empty`},
		{withAnnotations(inject, `dedupe-proxy.io/config: Orders_Proxy`), `"Orders_Proxy" is not a ConfigMap name`},
		{withAnnotations(inject, config, `dedupe-proxy.io/secret: creds`), `annotation dedupe-proxy.io/secret: unknown; known: dedupe-proxy.io/admin-port,`},
		{withAnnotations(inject, config, `dedupe-proxy.io/secrets: "a,,b"`), `annotation dedupe-proxy.io/secrets: "" is not a Secret name`},
		{withAnnotations(inject, config, `dedupe-proxy.io/native-sidecar: "on"`), `annotation dedupe-proxy.io/native-sidecar: must be "true" or "false", got "on"`},
		{withAnnotations(inject, config, `dedupe-proxy.io/admin-port: "70000"`), `annotation dedupe-proxy.io/admin-port: "70000" is not a port number`},
		{withAnnotations(inject, config, `dedupe-proxy.io/admin-port: "8080"`), `container app uses port 8080, the proxy's admin port`},
		{withAnnotations(inject, config, `dedupe-proxy.io/memory-limit: 256MB`), `annotation dedupe-proxy.io/memory-limit: "256MB" is not a Kubernetes quantity`},
		{withAnnotations(inject, config, `dedupe-proxy.io/image: "a b"`), `annotation dedupe-proxy.io/image: "a b" is not an image reference`},
		// Opted in on the Deployment's own metadata, not the pod template's.
		{strings.Replace(withAnnotations(`team: x`), "  name: orders\n", "  name: orders\n  annotations: {dedupe-proxy.io/inject: \"true\"}\n", 1),
			`Deployment/orders: dedupe-proxy.io/inject is on the Deployment's own metadata; inject reads the pod template's: move it to spec.template.metadata.annotations`},
		{strings.Replace(withAnnotations(inject, config), "apps/v1\nkind: Deployment", "argoproj.io/v1alpha1\nkind: Rollout", 1),
			`Rollout/orders: dedupe-proxy.io/inject "true", but inject handles Pod, Deployment`},
		{"apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    metadata:\n      annotations: {dedupe-proxy.io/inject: \"true\", dedupe-proxy.io/config: c, dedupe-proxy.io/native-sidecar: \"false\"}\n    spec: {restartPolicy: Never, containers: [{name: j, image: j}]}\n",
			`Job/j: annotation dedupe-proxy.io/native-sidecar: "false": a regular sidecar container never exits, so the Job would never complete`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: orders-proxy}\ndata:\n  config.yaml: |\n    app: {url: http://127.0.0.1:8080}\n---\n" + withAnnotations(inject, config),
			`document 2 (line 7): Deployment/orders: ConfigMap orders-proxy, config.yaml: admin.listen is not set, and its default 127.0.0.1:9090 is loopback`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: orders-proxy}\ndata:\n  config.yaml: |\n    admin: {listen: 127.0.0.1:9090}\n---\n" + withAnnotations(inject, config),
			`admin.listen "127.0.0.1:9090" is loopback: the kubelet's probes cannot reach it; use 0.0.0.0:9090`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: orders-proxy}\ndata:\n  config.yaml: |\n    admin: {listen: 0.0.0.0:9191}\n---\n" + withAnnotations(inject, config),
			`admin.listen "0.0.0.0:9191" is not on port 9090, where the probes go; set annotation dedupe-proxy.io/admin-port: "9191"`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: orders-proxy}\ndata: {other: x}\n---\n" + withAnnotations(inject, config),
			`ConfigMap orders-proxy has no key config.yaml`},
		{strings.Replace(withAnnotations(inject, config), "      containers:\n", "      containers:\n        - name: dedupe-proxy\n          image: x\n        - name: dedupe-proxy\n          image: y\n", 1),
			`two containers named dedupe-proxy`},
		{"a: [1\n", `document 1 (line 1): invalid YAML`},
	} {
		out, _, err := Stream([]byte(tc.in), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q\ninput:\n%s", err, tc.want, tc.in)
		}
		if out != nil {
			t.Errorf("wrote output on error")
		}
	}
}

// TestReportsEveryProblem: all the bad annotations of a workload in one
// run, as `validate` does for a config.
func TestReportsEveryProblem(t *testing.T) {
	_, _, err := Stream([]byte(withAnnotations(`dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/config: Bad_Name`, `dedupe-proxy.io/admin-port: x`, `dedupe-proxy.io/cpu-request: lots`)), Options{})
	for _, want := range []string{`dedupe-proxy.io/config: "Bad_Name" is not a ConfigMap name`, "dedupe-proxy.io/admin-port", "dedupe-proxy.io/cpu-request"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestSwitchToNativeSidecar: turning native-sidecar on moves the existing
// container from containers to initContainers, and back.
func TestSwitchToNativeSidecar(t *testing.T) {
	base := withAnnotations(`dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/config: orders-proxy`)
	regular, _, err := Stream([]byte(base), Options{})
	if err != nil {
		t.Fatal(err)
	}
	native := strings.Replace(string(regular), "dedupe-proxy.io/config: orders-proxy\n", "dedupe-proxy.io/config: orders-proxy\n        dedupe-proxy.io/native-sidecar: \"true\"\n", 1)
	got, _, err := Stream([]byte(native), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(got)
	if strings.Count(s, "name: dedupe-proxy\n") != 1 || !strings.Contains(s, "initContainers:\n        - name: dedupe-proxy\n") || !strings.Contains(s, "restartPolicy: Always") {
		t.Errorf("want one native sidecar:\n%s", s)
	}
	back, _, err := Stream([]byte(strings.Replace(s, `native-sidecar: "true"`, `native-sidecar: "false"`, 1)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b := string(back); strings.Contains(b, "initContainers") || strings.Count(b, "name: dedupe-proxy\n") != 1 || strings.Contains(b, "restartPolicy") {
		t.Errorf("want one regular sidecar:\n%s", b)
	}
}

// TestInjectedDocumentKeepsItsText: re-encoding an injected workload keeps
// quoting, flow style, block scalars and long lines as they were, so no
// value changes meaning or shape for the YAML 1.1 parser kubectl uses.
func TestInjectedDocumentKeepsItsText(t *testing.T) {
	kept := []string{
		`          args: ["sh", "-c", "a command line well beyond eighty characters in width, which must not be folded by the encoder"]`,
		`            - {name: A, value: "yes"}`,
		`            - {name: B, value: '0755'}`,
		"            - name: SCRIPT\n              value: |\n                line one\n                  indented two\n                last\n",
		"          image: app:1 # the app's own comment",
	}
	in := strings.Replace(withAnnotations(`dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/config: orders-proxy`),
		"          image: app:1\n", kept[4]+"\n"+kept[0]+"\n          env:\n"+kept[1]+"\n"+kept[2]+"\n"+kept[3], 1)
	got, _, err := Stream([]byte(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kept {
		if !strings.Contains(string(got), k) {
			t.Errorf("output lost %q:\n%s", k, got)
		}
	}
}

// TestShapesItCannotEdit: each testdata/invalid/*.yaml opts a workload in
// but has a field inject would have to replace to add the sidecar
// (containers: "oops" once came out as a pod with the sidecar alone, the
// app gone). Each is refused with the exact error of its first line,
// naming the document, the workload and the field, and nothing is written.
func TestShapesItCannotEdit(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) < 8 {
		t.Fatalf("want the invalid inputs, found %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(src), "\n")
			want, ok := strings.CutPrefix(first, "# error: ")
			if !ok {
				t.Fatalf("first line %q is not '# error: <the exact error>'", first)
			}
			out, res, err := Stream(src, Options{})
			if err == nil || err.Error() != want {
				t.Errorf("error:\n  got  %v\n  want %s", err, want)
			}
			if out != nil || len(res.Injected) > 0 && err == nil {
				t.Errorf("wrote output on error:\n%s", out)
			}
		})
	}
}

// TestDefaultConfigMap: with dedupe-proxy.io/inject: "true" alone the
// ConfigMap is DefaultConfigMap, in the volume, the pods' label and the
// lookup of a ConfigMap in the same input; a named one still wins.
func TestDefaultConfigMap(t *testing.T) {
	got, res, err := Stream([]byte(withAnnotations(`dedupe-proxy.io/inject: "true"`)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(got)
	if len(res.Injected) != 1 || !strings.Contains(s, "dedupe-proxy.io/config: "+DefaultConfigMap+"}") ||
		!strings.Contains(s, "configMap:\n            name: "+DefaultConfigMap+"\n") {
		t.Errorf("want ConfigMap %s in the label and the volume:\n%s", DefaultConfigMap, s)
	}
	named, _, err := Stream([]byte(withAnnotations(`dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/config: orders-proxy`)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(named), "configMap:\n            name: orders-proxy\n") {
		t.Errorf("the annotation's ConfigMap lost to the default:\n%s", named)
	}
}

// Result.Unpublished lists exactly the workloads whose sidecar got an
// image of DefaultRepository: not another one named by the option or an
// annotation.
func TestUnpublishedImage(t *testing.T) {
	src, _ := os.ReadFile("testdata/pod.in.yaml")
	_, res, err := Stream(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Unpublished) != 1 || res.Unpublished[0] != res.Injected[0] {
		t.Errorf("default image: Unpublished = %v, Injected = %v", res.Unpublished, res.Injected)
	}
	if _, res, _ := Stream(src, Options{Image: "registry.example.com/dedupe-proxy:v9"}); len(res.Unpublished) != 0 {
		t.Errorf("--image: Unpublished = %v", res.Unpublished)
	}
	if _, res, _ := Stream(src, Options{Image: DefaultRepository + ":0.2.0"}); len(res.Unpublished) != 1 {
		t.Errorf("--image of the default repository: Unpublished = %v", res.Unpublished)
	}
	for image, want := range map[string]bool{
		DefaultImage: true, DefaultRepository: true, DefaultRepository + "@sha256:00": true,
		DefaultRepository + "-fork:1": false, "registry.example.com/" + DefaultRepository + ":1": false,
	} {
		if Unpublished(image) != want {
			t.Errorf("Unpublished(%q) = %v", image, !want)
		}
	}
	stream := withAnnotations(`dedupe-proxy.io/inject: "true"`) + "---\n" +
		strings.Replace(withAnnotations(`dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/image: "registry.example.com/dp:1"`), "name: orders", "name: billing", 1)
	_, res, err = Stream([]byte(stream), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Injected) != 2 || len(res.Unpublished) != 1 || res.Unpublished[0] != "Deployment/orders" {
		t.Errorf("one annotated image of two: Injected %v, Unpublished %v", res.Injected, res.Unpublished)
	}
}

// TestReadinessAnnotation: the sidecar's readiness probe reports the proxy
// process unless dedupe-proxy.io/readiness: deps asks for its broker and
// Redis too; the pod's readiness is the app's in its Service.
func TestReadinessAnnotation(t *testing.T) {
	inj, cfg := `dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/config: orders-proxy`
	for _, tc := range []struct {
		in, path string
	}{
		{withAnnotations(inj, cfg), "/readyz"},
		{withAnnotations(inj, cfg, `dedupe-proxy.io/readiness: process`), "/readyz"},
		{withAnnotations(inj, cfg, `dedupe-proxy.io/readiness: deps`), "/readyz?deps=1"},
	} {
		got, _, err := Stream([]byte(tc.in), Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := "readinessProbe:\n            httpGet:\n              path: " + tc.path + "\n              port: proxy-admin\n"
		if !strings.Contains(string(got), want) {
			t.Errorf("want %q in:\n%s", want, got)
		}
	}
	_, _, err := Stream([]byte(withAnnotations(inj, cfg, `dedupe-proxy.io/readiness: strict`)), Options{})
	if want := `annotation dedupe-proxy.io/readiness: must be "process" (ready while the proxy runs) or "deps" (ready while its broker and Redis are up), got "strict"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
}

// chartConfigMap is the ConfigMap the chart renders in mode shared as
// release "other" (labels as helm template writes them).
const chartConfigMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: other-dedupe-proxy
  labels:
    helm.sh/chart: dedupe-proxy-0.2.0
    app.kubernetes.io/name: dedupe-proxy
    app.kubernetes.io/instance: other
data:
  config.yaml: |
    admin: {listen: 0.0.0.0:9090}
---
`

// TestConfigMapUnderAnotherName: the input holds the chart's ConfigMap
// as release "other" while the workload mounts the default dedupe-proxy:
// its pods would sit in ContainerCreating, so Result says which
// annotation to add.
func TestConfigMapUnderAnotherName(t *testing.T) {
	inj := `dedupe-proxy.io/inject: "true"`
	_, res, err := Stream([]byte(chartConfigMap+withAnnotations(inj)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "Deployment/orders mounts ConfigMap dedupe-proxy, which is not in the input, but the input holds the dedupe-proxy ConfigMap other-dedupe-proxy: " +
		"add dedupe-proxy.io/config: other-dedupe-proxy to spec.template.metadata.annotations"
	if len(res.WrongConfigMap) != 1 || res.WrongConfigMap[0] != want || len(res.NoConfigMap) != 0 {
		t.Errorf("WrongConfigMap %q, NoConfigMap %q; want %q", res.WrongConfigMap, res.NoConfigMap, want)
	}
	// A Pod's annotations are on its own metadata.
	pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {dedupe-proxy.io/inject: \"true\", dedupe-proxy.io/config: orders-proxy}\nspec:\n  containers: [{name: app, image: app:1}]\n"
	_, res, err = Stream([]byte(chartConfigMap+pod), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.WrongConfigMap) != 1 || !strings.HasSuffix(res.WrongConfigMap[0], "Pod/p mounts ConfigMap orders-proxy, which is not in the input, but the input holds the dedupe-proxy ConfigMap other-dedupe-proxy: add dedupe-proxy.io/config: other-dedupe-proxy to metadata.annotations") {
		t.Errorf("WrongConfigMap %q", res.WrongConfigMap)
	}
	// Annotated with the right name: nothing to say, and the checksum.
	got, res, err := Stream([]byte(chartConfigMap+withAnnotations(inj, `dedupe-proxy.io/config: other-dedupe-proxy`)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.WrongConfigMap) != 0 || len(res.NoConfigMap) != 0 || !strings.Contains(string(got), "dedupe-proxy.io/config-checksum: ") {
		t.Errorf("WrongConfigMap %q, NoConfigMap %q:\n%s", res.WrongConfigMap, res.NoConfigMap, got)
	}
	// In another namespace it is not the workload's.
	other := strings.Replace(chartConfigMap, "  name: other-dedupe-proxy\n", "  name: other-dedupe-proxy\n  namespace: billing\n", 1)
	_, res, err = Stream([]byte(other+strings.Replace(withAnnotations(inj), "  name: orders\n", "  name: orders\n  namespace: shop\n", 1)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.WrongConfigMap) != 0 || len(res.NoConfigMap) != 1 || res.NoConfigMap[0] != "Deployment/shop/orders: dedupe-proxy" {
		t.Errorf("other namespace: WrongConfigMap %q, NoConfigMap %q", res.WrongConfigMap, res.NoConfigMap)
	}
}

// TestNoConfigMap: an input without a dedupe-proxy ConfigMap (another
// ConfigMap does not count) names each workload and the ConfigMap it
// needs.
func TestNoConfigMap(t *testing.T) {
	plain := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-settings}\ndata: {a: b}\n---\n"
	_, res, err := Stream([]byte(plain+withAnnotations(`dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/config: orders-proxy`)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NoConfigMap) != 1 || res.NoConfigMap[0] != "Deployment/orders: orders-proxy" || len(res.WrongConfigMap) != 0 {
		t.Errorf("NoConfigMap %q, WrongConfigMap %q", res.NoConfigMap, res.WrongConfigMap)
	}
}

// TestReadManifests: a directory's *.yaml, *.yml and *.json files in
// name order, one stream, as `linkerd inject -f DIR` reads them; other
// files and subdirectories are left out.
func TestReadManifests(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a-config.yaml": chartConfigMap,
		"b-worker.yml":  withAnnotations(`dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/config: other-dedupe-proxy`),
		"c-job.json": `{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {` +
			`"metadata": {"annotations": {"dedupe-proxy.io/inject": "true", "dedupe-proxy.io/config": "other-dedupe-proxy"}}, ` +
			`"spec": {"restartPolicy": "Never", "containers": [{"name": "j", "image": "j:1"}]}}}}`, // no final newline
		"d-notes.txt":        "not: a manifest\n",
		"sub/e-ignored.yaml": withAnnotations(`dedupe-proxy.io/inject: "true"`),
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in, err := ReadManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := files["a-config.yaml"] + "---\n" + files["b-worker.yml"] + "---\n" + files["c-job.json"] + "\n"; string(in) != want {
		t.Fatalf("ReadManifests = %q, want %q", in, want)
	}
	_, res, err := Stream(in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Injected, ",") != "Deployment/orders,Job/j" || len(res.WrongConfigMap)+len(res.NoConfigMap) != 0 {
		t.Errorf("result %+v", res)
	}
	// A file is read as it is.
	if b, err := ReadManifests(filepath.Join(dir, "d-notes.txt")); err != nil || string(b) != files["d-notes.txt"] {
		t.Errorf("file: %q %v", b, err)
	}
	if _, err := ReadManifests(filepath.Join(dir, "sub", "..", "sub", "none")); err == nil {
		t.Error("a missing path: no error")
	}
	empty := t.TempDir()
	if _, err := ReadManifests(empty); err == nil || !strings.Contains(err.Error(), "no *.yaml, *.yml, *.json files") {
		t.Errorf("empty directory: %v", err)
	}
}
