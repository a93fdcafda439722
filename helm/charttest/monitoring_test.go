package charttest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The pod label `dedupe-proxy inject` sets to the ConfigMap's name.
const injectLabel = "dedupe-proxy.io/config"

// checkShared: mode shared's Service selects exactly the pods inject
// labels with this release's ConfigMap, on the admin port by number (the
// injected container's port is the annotation's, not the chart's name).
func checkShared(t *testing.T, objs *Objects, svc *corev1.Service, cfg proxyConfig) {
	cm, err := objs.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{injectLabel: cm.Name}
	if !sameMap(svc.Spec.Selector, want) {
		t.Errorf("Service selector %v, want %v", svc.Spec.Selector, want)
	}
	if tp := svc.Spec.Ports[0].TargetPort; tp.Type != intstr.Int || tp.IntVal != cfg.adminPort {
		t.Errorf("Service targetPort %s, want the admin port %d", tp.String(), cfg.adminPort)
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkMonitoring: the ServiceMonitor scrapes the admin Service, the
// alerts select that Service's job, the dashboard is a labelled JSON.
func checkMonitoring(t *testing.T, objs *Objects, svc *corev1.Service) {
	for _, sm := range objs.ServiceMonitors {
		if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
			t.Error("ServiceMonitor selector does not match the Service")
		}
		if webhook := svc.Name + "-webhook"; slices.ContainsFunc(objs.Services, func(s *corev1.Service) bool {
			return s.Name == webhook && labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels))
		}) {
			// Selecting it too is harmless only while no endpoint names its port.
			for _, ep := range sm.Spec.Endpoints {
				if strings.HasPrefix(ep.Port, "webhook") {
					t.Errorf("ServiceMonitor scrapes a webhook port %s", ep.Port)
				}
			}
		}
		for _, ep := range sm.Spec.Endpoints {
			if ep.Port != svc.Spec.Ports[0].Name || ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor scrapes port %q path %q, want %q /metrics", ep.Port, ep.Path, svc.Spec.Ports[0].Name)
			}
		}
	}
	sel := fmt.Sprintf(`job=%q, namespace=%q`, svc.Name, "default")
	for _, pr := range objs.PrometheusRules {
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				if !strings.HasPrefix(r.Alert, "DedupeProxy") {
					continue // prometheusRule.additionalRules: the release's own, as written
				}
				if !strings.Contains(r.Expr.String(), sel) {
					t.Errorf("alert %s: %s does not select %s", r.Alert, r.Expr.String(), sel)
				}
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
					t.Errorf("alert %s has no severity or summary", r.Alert)
				}
			}
		}
	}
	for _, cm := range objs.ConfigMaps {
		js, ok := cm.Data["dedupe-proxy.json"]
		if !ok {
			continue
		}
		if cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap %s lacks the grafana_dashboard label", cm.Name)
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(js), &d); err != nil {
			t.Errorf("dashboard is not JSON: %v", err)
		}
	}
}

// checkWebhook: one Service port per webhook source on its listen port,
// the proxy container exposing it (mode deployment), the Ingress routing
// each source's exact path to its port.
func checkWebhook(t *testing.T, objs *Objects, cfg proxyConfig, shared bool) {
	type hook struct {
		port int32
		path string
	}
	var hooks []hook
	sources, _ := cfg.raw["sources"].([]any)
	for _, s := range sources {
		src, _ := s.(map[string]any)
		if src["type"] != "webhook" {
			continue
		}
		wh, _ := src["webhook"].(map[string]any)
		listen, _ := wh["listen"].(string)
		port, err := strconv.Atoi(listen[strings.LastIndex(listen, ":")+1:])
		if err != nil {
			t.Fatalf("webhook listen %q", listen)
		}
		path, _ := wh["path"].(string)
		if path == "" {
			path = "/webhook"
		}
		hooks = append(hooks, hook{int32(port), path})
	}
	var svc *corev1.Service
	for _, s := range objs.Services {
		if strings.HasSuffix(s.Name, "-webhook") {
			svc = s
		}
	}
	if svc == nil {
		return
	}
	if len(svc.Spec.Ports) != len(hooks) {
		t.Fatalf("webhook Service has %d ports for %d webhook sources", len(svc.Spec.Ports), len(hooks))
	}
	for i, h := range hooks {
		p := svc.Spec.Ports[i]
		if p.Port != h.port || p.TargetPort.IntVal != h.port {
			t.Errorf("webhook Service port %d -> %s, want %d", p.Port, p.TargetPort.String(), h.port)
		}
	}
	if !shared {
		d := objs.Deployments[0]
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Error("webhook Service does not select the pods")
		}
		proxy, _, _ := Proxy(d)
		for _, h := range hooks {
			if !slices.ContainsFunc(proxy.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == h.port }) {
				t.Errorf("proxy container does not expose webhook port %d", h.port)
			}
		}
	}
	for _, ing := range objs.Ingresses {
		paths := ing.Spec.Rules[0].HTTP.Paths
		if len(paths) != len(hooks) {
			t.Fatalf("Ingress has %d paths for %d webhook sources", len(paths), len(hooks))
		}
		for i, h := range hooks {
			p := paths[i]
			if p.Path != h.path || p.PathType == nil || *p.PathType != networkingv1.PathTypeExact ||
				p.Backend.Service.Name != svc.Name || p.Backend.Service.Port.Number != h.port {
				t.Errorf("Ingress path %s -> %s:%d, want %s (Exact) -> %s:%d", p.Path, p.Backend.Service.Name, p.Backend.Service.Port.Number, h.path, svc.Name, h.port)
			}
		}
	}
}

// TestAlertsMatchReadme: the PrometheusRule holds exactly the alerts the
// operations page lists ("Metrics and alerts"), each expression as
// written there once the release's selector is taken out.
func TestAlertsMatchReadme(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)[Aa]lerts worth having:\\s*```promql\\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("docs/operations.md has no 'alerts worth having' promql block")
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	var want []string
	for _, l := range strings.Split(string(block[1]), "\n") {
		if e, _, _ := strings.Cut(l, "#"); strings.TrimSpace(e) != "" {
			want = append(want, norm(e))
		}
	}
	objs := render(t, "", "--set", "prometheusRule.enabled=true")
	if len(objs.PrometheusRules) != 1 {
		t.Fatalf("want 1 PrometheusRule, got %d", len(objs.PrometheusRules))
	}
	var got []string
	for _, g := range objs.PrometheusRules[0].Spec.Groups {
		for _, r := range g.Rules {
			e := strings.ReplaceAll(r.Expr.String(), `{job="ci-dedupe-proxy", namespace="default"}`, "")
			e = strings.ReplaceAll(e, `job="ci-dedupe-proxy", namespace="default", `, "")
			got = append(got, norm(e))
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("PrometheusRule expressions\n  %s\ndocs/operations.md alerts\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestDashboardMetricsExist: every metric the dashboard queries is one the
// proxy registers (internal/metrics), so a renamed metric breaks this
// test instead of a panel.
func TestDashboardMetricsExist(t *testing.T) {
	files, _ := filepath.Glob("../../internal/metrics/*.go")
	registered := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`Name:\s+"(dedupe_proxy_[a-z_]+)"`).FindAllSubmatch(b, -1) {
			registered[string(m[1])] = true
		}
	}
	if len(registered) < 10 {
		t.Fatalf("found only %d metrics in internal/metrics", len(registered))
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "dedupe-proxy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range regexp.MustCompile(`dedupe_proxy_[a-z_]+`).FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !registered[base] {
					t.Errorf("panel %q queries %s, which the proxy does not register", p.Title, m)
				}
				used++
			}
		}
	}
	if used == 0 {
		t.Error("the dashboard queries no metric")
	}
}

// TestDashboardShowsBacklogs: each backlog a source exports has a panel,
// so an operator sees a consumer falling behind on every broker that
// reports one (Kafka's lag, a Redis list's length), and the namespace
// and job variables match series without those labels (a Prometheus
// outside Kubernetes) when set to All.
func TestDashboardShowsBacklogs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "dedupe-proxy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct{ Name, AllValue string }
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	for _, backlog := range []string{"dedupe_proxy_kafka_lag_messages", "dedupe_proxy_redis_queue_length", "dedupe_proxy_redis_processing_length"} {
		found := false
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				found = found || strings.Contains(tg.Expr, backlog+"{")
			}
		}
		if !found {
			t.Errorf("no panel shows %s", backlog)
		}
	}
	for _, v := range d.Templating.List {
		if (v.Name == "namespace" || v.Name == "job") && v.AllValue != ".*" {
			t.Errorf("variable %s: allValue %q, want .* (matches a series without the label)", v.Name, v.AllValue)
		}
	}
}
