package charttest

import (
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func containerNames(cs []corev1.Container) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

// TestExtensions renders ci/extensions-values.yaml: additionalLabels on
// every object and pod but not in selectors, image registries, the update
// strategy, extraVolumes, extra and init containers in their order, and the release's
// own alerting rule next to the chart's.
func TestExtensions(t *testing.T) {
	values := filepath.Join(chartDir, "ci", "extensions-values.yaml")
	objs := render(t, values)
	for _, o := range objs.All {
		if l := o.GetLabels(); l["team"] != "payments" || l["cost-center"] != "4711" {
			t.Errorf("%s lacks additionalLabels: %v", o.GetName(), l)
		}
	}
	d := objs.Deployments[0]
	if l := d.Spec.Template.Labels; l["team"] != "payments" {
		t.Errorf("pod template lacks additionalLabels: %v", l)
	}
	if _, ok := d.Spec.Selector.MatchLabels["team"]; ok {
		t.Error("additionalLabels in the Deployment's selector (immutable: changing them would need a new Deployment)")
	}
	for _, svc := range objs.Services {
		if _, ok := svc.Spec.Selector["team"]; ok {
			t.Errorf("additionalLabels in Service %s's selector", svc.Name)
		}
	}
	s := d.Spec.Strategy
	if s.Type != "RollingUpdate" || s.RollingUpdate == nil || s.RollingUpdate.MaxSurge.String() != "1" || s.RollingUpdate.MaxUnavailable.String() != "0" {
		t.Errorf("strategy %+v", s)
	}
	spec := d.Spec.Template.Spec
	var vols []string
	for _, v := range spec.Volumes {
		vols = append(vols, v.Name)
	}
	if !slices.Contains(vols, "scratch") {
		t.Errorf("pod volumes %v lack extraVolumes' scratch", vols)
	}
	if got := containerNames(spec.InitContainers); !slices.Equal(got, []string{"wait-for-db", "migrate", ProxyContainerName}) {
		t.Errorf("initContainers %v, want extraInitContainers, app.initContainers, then the native sidecar", got)
	}
	if got := containerNames(spec.Containers); !slices.Equal(got, []string{"app", "log-shipper"}) {
		t.Errorf("containers %v, want the app, then extraContainers", got)
	}
	proxy, _, err := Proxy(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, got, want string }{
		{"app", spec.Containers[0].Image, "registry.example.com/shop/orders-worker:2.4.1"},
		{"proxy (registry with a trailing /)", proxy.Image, "registry.example.com/dedupe-proxy:v0.1.0"},
		{"test pod (the tag from values)", objs.Pods[0].Spec.Containers[0].Image, "mirror.example.com/busybox:1.37"},
	} {
		if c.got != c.want {
			t.Errorf("%s image %q, want %q", c.what, c.got, c.want)
		}
	}
	var alerts []string
	for _, g := range objs.PrometheusRules[0].Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Alert == "OrdersBacklog" && (r.For == nil || *r.For != "10m" || r.Labels["severity"] != "warning") {
				t.Errorf("additional rule changed on the way: %+v", r)
			}
		}
	}
	if !slices.Contains(alerts, "OrdersBacklog") || !slices.Contains(alerts, "DedupeProxyNotConsuming") {
		t.Errorf("alerts %v, want the chart's and OrdersBacklog", alerts)
	}

	// The proxy as a regular container: app, proxy, then the extras.
	objs = render(t, values, "--set", "proxy.nativeSidecar=false")
	spec = objs.Deployments[0].Spec.Template.Spec
	if got := containerNames(spec.Containers); !slices.Equal(got, []string{"app", ProxyContainerName, "log-shipper"}) {
		t.Errorf("containers %v, want the app, the proxy, then extraContainers", got)
	}
	if got := containerNames(spec.InitContainers); !slices.Equal(got, []string{"wait-for-db", "migrate"}) {
		t.Errorf("initContainers %v", got)
	}

	// The defaults change nothing: no strategy, no more containers, the
	// images as before.
	objs = render(t, "")
	d = objs.Deployments[0]
	if d.Spec.Strategy.Type != "" || len(d.Spec.Template.Spec.InitContainers) != 0 || len(d.Spec.Template.Spec.Containers) != 2 {
		t.Errorf("defaults: strategy %+v, init containers %v, containers %v", d.Spec.Strategy, containerNames(d.Spec.Template.Spec.InitContainers), containerNames(d.Spec.Template.Spec.Containers))
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/dedupe-proxy/dedupe-proxy-demoapp" {
		t.Errorf("default app image %q", img)
	}
	if img := objs.Pods[0].Spec.Containers[0].Image; img != "busybox:1.37" {
		t.Errorf("default test image %q", img)
	}
}
