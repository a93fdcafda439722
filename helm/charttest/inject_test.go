package charttest

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The tests of `dedupe-proxy inject` that need the Kubernetes types: the
// golden manifests of internal/inject decoded strictly, the sidecar
// compared with the chart's, and inject as a Helm post-renderer.

const injectGoldens = "../../internal/inject/testdata"

// defaultConfigMap is inject's ConfigMap for a workload without the
// dedupe-proxy.io/config annotation (inject.DefaultConfigMap, which this
// module cannot import); TestInjectDefaultIsSharedRelease ties it to the
// chart.
const defaultConfigMap = "dedupe-proxy"

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string // the temporary build directory, removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proxyBin is $DEDUPE_PROXY_BIN (helm/check.sh passes bin/dedupe-proxy),
// else the command built once into a temporary directory.
func proxyBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("DEDUPE_PROXY_BIN"); p != "" {
			binPath, binErr = filepath.Abs(p)
			return
		}
		dir, err := os.MkdirTemp("", "charttest-bin")
		if err != nil {
			binErr = err
			return
		}
		binDir, binPath = dir, filepath.Join(dir, "dedupe-proxy")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/dedupe-proxy")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/dedupe-proxy: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func runInject(t *testing.T, in []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(proxyBin(t), append([]string{"inject", "-q"}, args...)...)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dedupe-proxy inject: %v\n%s", err, stderr.String())
	}
	return out
}

// TestInjectGoldensDecodeStrictly: every golden output of inject decodes
// strictly into the Kubernetes types, and every workload that asked for
// the sidecar has exactly one, wired as the chart wires it.
func TestInjectGoldensDecodeStrictly(t *testing.T) {
	outs, _ := filepath.Glob(filepath.Join(injectGoldens, "*.out.yaml"))
	if len(outs) < 9 {
		t.Fatalf("want the golden outputs of every kind in %s, found %d", injectGoldens, len(outs))
	}
	kinds := map[string]bool{}
	for _, f := range outs {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Decode(b)
			if err != nil {
				t.Fatalf("strict decode: %v", err)
			}
			for _, pt := range objs.PodTemplates() {
				if pt.Meta.Annotations["dedupe-proxy.io/inject"] != "true" {
					if _, _, err := ProxyIn(pt.Spec, pt.Name); err == nil {
						t.Errorf("%s %s did not ask for the sidecar but has one", pt.Kind, pt.Name)
					}
					continue
				}
				kinds[pt.Kind] = true
				checkInjected(t, pt)
			}
		})
	}
	for _, k := range []string{"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod"} {
		if !kinds[k] {
			t.Errorf("no golden injects a %s", k)
		}
	}
}

func checkInjected(t *testing.T, pt PodTemplate) {
	t.Helper()
	proxy, native, err := ProxyIn(pt.Spec, pt.Kind+" "+pt.Name)
	if err != nil {
		t.Fatal(err)
	}
	wantNative := pt.Meta.Annotations["dedupe-proxy.io/native-sidecar"] == "true" || pt.Kind == "Job" || pt.Kind == "CronJob"
	if native != wantNative {
		t.Errorf("%s %s: native sidecar %v, want %v", pt.Kind, pt.Name, native, wantNative)
	}
	if native && (proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
		t.Errorf("%s %s: native sidecar without restartPolicy: Always", pt.Kind, pt.Name)
	}
	cm, named := pt.Meta.Annotations["dedupe-proxy.io/config"]
	if !named {
		cm = defaultConfigMap
	}
	if pt.Meta.Labels[injectLabel] != cm {
		t.Errorf("%s %s: label %s=%q, want %q", pt.Kind, pt.Name, injectLabel, pt.Meta.Labels[injectLabel], cm)
	}
	var vol *corev1.Volume
	for i := range pt.Spec.Volumes {
		if pt.Spec.Volumes[i].Name == "dedupe-proxy-config" {
			if vol != nil {
				t.Errorf("%s %s: volume dedupe-proxy-config twice", pt.Kind, pt.Name)
			}
			vol = &pt.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != cm {
		t.Errorf("%s %s: ConfigMap %s is not a volume", pt.Kind, pt.Name, cm)
	}
	if g := pt.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("%s %s: terminationGracePeriodSeconds %v, want above the proxy's 30s shutdown_timeout", pt.Kind, pt.Name, g)
	}
	names := map[string]bool{}
	for _, c := range slices.Concat(pt.Spec.InitContainers, pt.Spec.Containers) {
		if names[c.Name] {
			t.Errorf("%s %s: container %s twice", pt.Kind, pt.Name, c.Name)
		}
		names[c.Name] = true
	}
	if len(pt.Spec.Containers) == 0 || pt.Spec.Containers[0].Name == ProxyContainerName && len(pt.Spec.Containers) == 1 {
		t.Errorf("%s %s: no app container", pt.Kind, pt.Name)
	}
	ready := "/readyz"
	if pt.Meta.Annotations["dedupe-proxy.io/readiness"] == "deps" {
		ready = "/readyz?deps=1"
	}
	if proxy.LivenessProbe == nil || proxy.LivenessProbe.HTTPGet.Path != "/healthz" ||
		proxy.ReadinessProbe == nil || proxy.ReadinessProbe.HTTPGet.Path != ready {
		t.Errorf("%s %s: probes are not /healthz and %s", pt.Kind, pt.Name, ready)
	}
}

// TestInjectMatchesChart keeps one source of truth: the container inject
// adds is the chart's sidecar, field for field (image, args, ports,
// probes, resources, securityContext, mounts), regular and native, with
// the default readiness probe and with the strict one (chart value
// proxy.readiness, annotation dedupe-proxy.io/readiness).
func TestInjectMatchesChart(t *testing.T) {
	for _, tc := range []struct {
		native bool
		deps   bool
	}{{false, false}, {true, false}, {false, true}} {
		native := tc.native
		args := []string{"--set", "proxy.nativeSidecar=" + map[bool]string{false: "false", true: "true"}[native]}
		if tc.deps {
			args = append(args, "--set", "proxy.readiness=deps")
		}
		objs := render(t, "", args...)
		chart, _, err := Proxy(objs.Deployments[0])
		if err != nil {
			t.Fatal(err)
		}
		cm, err := objs.ConfigMap()
		if err != nil {
			t.Fatal(err)
		}
		ann := "dedupe-proxy.io/inject: \"true\"\n        dedupe-proxy.io/config: " + cm.Name
		if native {
			ann += "\n        dedupe-proxy.io/native-sidecar: \"true\""
		}
		if tc.deps {
			ann += "\n        dedupe-proxy.io/readiness: deps"
		}
		in := `apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  selector: {matchLabels: {app: a}}
  template:
    metadata:
      labels: {app: a}
      annotations:
        ` + ann + `
    spec:
      containers: [{name: app, image: "app:1"}]
`
		injected, err := Decode(runInject(t, []byte(in)))
		if err != nil {
			t.Fatalf("strict decode: %v", err)
		}
		got, gotNative, err := Proxy(injected.Deployments[0])
		if err != nil {
			t.Fatal(err)
		}
		if gotNative != native {
			t.Errorf("native %v: inject put the sidecar in initContainers = %v", native, gotNative)
		}
		if !reflect.DeepEqual(got, chart) {
			t.Errorf("native %v, deps %v: inject's sidecar differs from the chart's:\ninject: %+v\nchart:  %+v", native, tc.deps, *got, *chart)
		}
		if v := injected.Deployments[0].Spec.Template.Spec.Volumes; len(v) != 1 || !reflect.DeepEqual(v[0], objs.Deployments[0].Spec.Template.Spec.Volumes[0]) {
			t.Errorf("inject's volume %+v differs from the chart's %+v", v, objs.Deployments[0].Spec.Template.Spec.Volumes)
		}
	}
}

// TestPostRenderer: a chart that knows nothing of dedupe-proxy but two
// annotations, rendered with inject as Helm's post-renderer. The
// annotated Deployment and CronJob get the sidecar, the rest comes out as
// rendered, and a dedupe-proxy release in mode shared selects the
// injected pods with its metrics Service.
func TestPostRenderer(t *testing.T) {
	plain, err := Template("testdata/app-chart", "orders", "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Template("testdata/app-chart", "orders", "", "--post-renderer", proxyBin(t), "--post-renderer-args", "inject")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	sharedObjs, err := Template(chartDir, "orders", "", "--set", "mode=shared")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := Decode(sharedObjs)
	if err != nil {
		t.Fatal(err)
	}
	svc := adminService(t, sh)
	injected := map[string]bool{}
	for _, pt := range objs.PodTemplates() {
		want := pt.Name == "orders-worker" || pt.Name == "orders-nightly"
		_, _, err := ProxyIn(pt.Spec, pt.Name)
		if (err == nil) != want {
			t.Errorf("%s %s: sidecar %v, want %v", pt.Kind, pt.Name, err == nil, want)
		}
		if want {
			checkInjected(t, pt)
			injected[pt.Name] = labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pt.Meta.Labels))
		}
	}
	if !injected["orders-worker"] || !injected["orders-nightly"] {
		t.Errorf("the shared release's Service %s (selector %v) does not select the injected pods: %v", svc.Name, svc.Spec.Selector, injected)
	}
	// The documents nobody annotated come out byte for byte.
	for _, doc := range strings.Split(string(plain), "\n---\n") {
		if strings.Contains(doc, "orders-web") && !strings.Contains(string(out), doc) {
			t.Errorf("not-annotated document changed:\n%s", doc)
		}
	}
}

// TestInjectDefaultIsSharedRelease: a workload with only
// dedupe-proxy.io/inject: "true" mounts the ConfigMap that the chart in
// mode shared renders as release dedupe-proxy, and that release's Service
// selects its pods.
func TestInjectDefaultIsSharedRelease(t *testing.T) {
	out, err := Template(chartDir, "dedupe-proxy", "", "--set", "mode=shared")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := sh.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != defaultConfigMap {
		t.Errorf("release dedupe-proxy in mode shared renders ConfigMap %q; inject's default is %q", cm.Name, defaultConfigMap)
	}
	svc := adminService(t, sh)
	in := `apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  selector: {matchLabels: {app: a}}
  template:
    metadata:
      labels: {app: a}
      annotations: {dedupe-proxy.io/inject: "true"}
    spec:
      containers: [{name: app, image: "app:1"}]
`
	injected, err := Decode(runInject(t, []byte(in)))
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	pts := injected.PodTemplates()
	if len(pts) != 1 {
		t.Fatalf("want one pod template, got %d", len(pts))
	}
	checkInjected(t, pts[0])
	if v := pts[0].Spec.Volumes; len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != cm.Name {
		t.Errorf("volumes %+v do not mount the shared ConfigMap %s", v, cm.Name)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pts[0].Meta.Labels)) {
		t.Errorf("the shared Service %s (selector %v) does not select the pod (labels %v)", svc.Name, svc.Spec.Selector, pts[0].Meta.Labels)
	}
}

// TestInjectNamesTheReleasesConfigMap: the chart in mode shared rendered
// as release "other" and a Deployment that opts in with the one
// annotation, piped through inject together. The sidecar mounts the
// default dedupe-proxy, which this input does not hold: stderr names the
// annotation that mounts other-dedupe-proxy instead, and with it added
// the warning goes and the pods mount the release's ConfigMap.
func TestInjectNamesTheReleasesConfigMap(t *testing.T) {
	shared, err := Template(chartDir, "other", "", "--set", "mode=shared")
	if err != nil {
		t.Fatal(err)
	}
	const deploy = `apiVersion: apps/v1
kind: Deployment
metadata: {name: orders}
spec:
  selector: {matchLabels: {app: o}}
  template:
    metadata:
      labels: {app: o}
      annotations:
        dedupe-proxy.io/inject: "true"
    spec:
      containers: [{name: app, image: "app:1"}]
`
	run := func(in string) (stdout, stderr string) {
		cmd := exec.Command(proxyBin(t), "inject", "--image", "registry.example.com/dedupe-proxy:1")
		cmd.Stdin = strings.NewReader(in)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("dedupe-proxy inject: %v\n%s", err, errb.String())
		}
		return string(out), errb.String()
	}
	_, stderr := run(string(shared) + "---\n" + deploy)
	const want = "dedupe-proxy inject: warning: Deployment/orders mounts ConfigMap dedupe-proxy, which is not in the input, but the input holds the dedupe-proxy ConfigMap other-dedupe-proxy: " +
		"add dedupe-proxy.io/config: other-dedupe-proxy to spec.template.metadata.annotations\n"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	out, stderr := run(string(shared) + "---\n" + strings.Replace(deploy, `dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/inject: "true"`+"\n        dedupe-proxy.io/config: other-dedupe-proxy", 1))
	if strings.Contains(stderr, "ConfigMap") {
		t.Errorf("annotated: stderr %q", stderr)
	}
	objs, err := Decode([]byte(out))
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	cm, err := objs.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	if v := objs.Deployments[0].Spec.Template.Spec.Volumes; len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != cm.Name || cm.Name != "other-dedupe-proxy" {
		t.Errorf("volumes %+v, want the ConfigMap %s", v, cm.Name)
	}
}

// TestInjectKeepsTheWorkloadsLabels: neither inject nor the chart puts
// dedupe-proxy's name on a workload of yours. Through inject as the
// post-renderer of a chart that knows nothing of dedupe-proxy, each
// annotated workload keeps its labels and its selector, and its pods
// gain exactly one label, dedupe-proxy.io/config, which the chart's
// mode shared Service selects them by; app.kubernetes.io/name: worker
// stays worker. In mode shared the chart renders no workload of its own
// (its only pod is the `helm test` hook), so nothing of it lands on
// yours.
func TestInjectKeepsTheWorkloadsLabels(t *testing.T) {
	plainOut, err := Template("testdata/app-chart", "orders", "")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Decode(plainOut)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Template("testdata/app-chart", "orders", "", "--post-renderer", proxyBin(t), "--post-renderer-args", "inject")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	// The workloads' own labels and selectors, by kind/name.
	own := func(o *Objects) map[string][2]map[string]string {
		m := map[string][2]map[string]string{}
		for _, d := range o.Deployments {
			m["Deployment/"+d.Name] = [2]map[string]string{d.Labels, d.Spec.Selector.MatchLabels}
		}
		for _, c := range o.CronJobs {
			m["CronJob/"+c.Name] = [2]map[string]string{c.Labels, c.Spec.JobTemplate.Labels}
		}
		return m
	}
	before, after := own(plain), own(objs)
	if len(before) != 3 || len(after) != len(before) {
		t.Fatalf("workloads before inject %v, after %v: want the app chart's three", before, after)
	}
	for k, b := range before {
		if a := after[k]; !sameMap(a[0], b[0]) || !sameMap(a[1], b[1]) {
			t.Errorf("%s: labels %v selector %v after inject, want %v and %v as rendered", k, a[0], a[1], b[0], b[1])
		}
	}
	pods := map[string]map[string]string{}
	for _, pt := range plain.PodTemplates() {
		pods[pt.Kind+"/"+pt.Name] = pt.Meta.Labels
	}
	injected := 0
	for _, pt := range objs.PodTemplates() {
		want := maps.Clone(pods[pt.Kind+"/"+pt.Name])
		if _, _, err := ProxyIn(pt.Spec, pt.Name); err == nil {
			injected++
			if want == nil {
				want = map[string]string{}
			}
			want[injectLabel] = pt.Meta.Annotations["dedupe-proxy.io/config"]
		}
		if !sameMap(pt.Meta.Labels, want) {
			t.Errorf("%s %s: pod labels %v, want %v", pt.Kind, pt.Name, pt.Meta.Labels, want)
		}
	}
	if injected != 2 {
		t.Errorf("%d pods got the sidecar, want 2 (worker, nightly)", injected)
	}
	if d := objs.Deployments; !slices.ContainsFunc(d, func(d *appsv1.Deployment) bool {
		return d.Name == "orders-worker" && d.Spec.Template.Labels["app.kubernetes.io/name"] == "worker"
	}) {
		t.Error("orders-worker's pods lost app.kubernetes.io/name: worker")
	}

	sharedOut, err := Template(chartDir, "orders", "", "--set", "mode=shared")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := Decode(sharedOut)
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range sh.PodTemplates() {
		if pt.Kind != "Pod" || pt.Meta.Annotations["helm.sh/hook"] != "test" {
			t.Errorf("mode shared renders %s %s: it must render no workload", pt.Kind, pt.Name)
		}
	}
	if len(sh.PDBs) != 0 {
		t.Errorf("mode shared renders %d PodDisruptionBudget(s), with no pod of its own to protect", len(sh.PDBs))
	}
}
