package charttest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

const chartDir = "../dedupe-proxy"

// valuesFiles are the renders every check runs on: the chart's defaults
// ("") and each ci/*-values.yaml.
func valuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/ci/*-values.yaml (err %v)", chartDir, err)
	}
	return append([]string{""}, files...)
}

func name(values string) string {
	if values == "" {
		return "chart-defaults"
	}
	return filepath.Base(values)
}

func render(t *testing.T, values string, args ...string) *Objects {
	t.Helper()
	out, err := Template(chartDir, "ci", values, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	return objs
}

// TestRender decodes every manifest of every render strictly and checks
// what holds the chart together: probes on the admin port the config
// listens on, the hardened sidecar, credentials only from Secrets, and
// selectors, ports and names that match across objects. Mode shared
// renders no pod: its Service must select the pods inject labels.
func TestRender(t *testing.T) {
	for _, values := range valuesFiles(t) {
		t.Run(name(values), func(t *testing.T) {
			objs := render(t, values)
			shared := stringValue(t, values, "mode") == "shared"
			want := map[string]int{"Deployment": 1, "Service": 1, "Pod": 1}
			if shared {
				want = map[string]int{"Deployment": 0, "Service": 1, "Pod": 1, "PodDisruptionBudget": 0, "ServiceAccount": 0}
			}
			if boolValue(t, values, "webhook", "service", "enabled") {
				want["Service"]++
			}
			got := map[string]int{"Deployment": len(objs.Deployments), "Service": len(objs.Services), "Pod": len(objs.Pods),
				"PodDisruptionBudget": len(objs.PDBs), "ServiceAccount": len(objs.ServiceAccounts)}
			for kind, n := range want {
				if got[kind] != n {
					t.Fatalf("want %d %s, got %d", n, kind, got[kind])
				}
			}
			checkNames(t, objs)
			cfg := parseConfig(t, objs)
			svc := adminService(t, objs)
			if shared {
				checkShared(t, objs, svc, cfg)
			} else {
				d := objs.Deployments[0]
				checkPod(t, d, objs, cfg, boolValue(t, values, "proxy", "nativeSidecar"), readinessPath(t, values))
				checkSelectors(t, d, objs, svc)
			}
			checkTestPod(t, objs, svc)
			checkMonitoring(t, objs, svc)
			checkWebhook(t, objs, cfg, shared)
		})
	}
}

// adminService is the Service in front of the admin port (the webhook
// Service is the other one).
func adminService(t *testing.T, objs *Objects) *corev1.Service {
	t.Helper()
	for _, s := range objs.Services {
		if !strings.HasSuffix(s.Name, "-webhook") {
			return s
		}
	}
	t.Fatal("no admin Service")
	return nil
}

type proxyConfig struct {
	raw             map[string]any
	adminPort       int32
	shutdownTimeout time.Duration
}

func parseConfig(t *testing.T, objs *Objects) proxyConfig {
	t.Helper()
	text, err := objs.Config()
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		t.Fatalf("config.yaml is not YAML: %v\n%s", err, text)
	}
	pc := proxyConfig{raw: raw, shutdownTimeout: 30 * time.Second}
	if s, ok := raw["shutdown_timeout"].(string); ok {
		if pc.shutdownTimeout, err = time.ParseDuration(s); err != nil {
			t.Fatalf("shutdown_timeout: %v", err)
		}
	}
	admin, _ := raw["admin"].(map[string]any)
	listen, _ := admin["listen"].(string)
	i := strings.LastIndex(listen, ":")
	port, err := strconv.Atoi(listen[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("admin.listen %q has no port", listen)
	}
	pc.adminPort = int32(port)
	if c, _ := raw["consumer"].(string); c == "" {
		t.Error("config.yaml has no consumer")
	}
	return pc
}

// readinessPath is the proxy's readiness probe path for proxy.readiness:
// the process by default, the broker and Redis too with deps.
func readinessPath(t *testing.T, values string) string {
	t.Helper()
	switch v := stringValue(t, values, "proxy", "readiness"); v {
	case "process":
		return "/readyz"
	case "deps":
		return "/readyz?deps=1"
	default:
		t.Fatalf("proxy.readiness %q", v)
		return ""
	}
}

func checkPod(t *testing.T, d *appsv1.Deployment, objs *Objects, cfg proxyConfig, wantNative bool, readyPath string) {
	spec := d.Spec.Template.Spec
	proxy, native, err := Proxy(d)
	if err != nil {
		t.Fatal(err)
	}
	if native != wantNative {
		t.Errorf("proxy in initContainers = %v, want %v (proxy.nativeSidecar)", native, wantNative)
	}
	if native && (proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
		t.Error("native sidecar without restartPolicy: Always would block the app from starting")
	}
	if !native && proxy.RestartPolicy != nil {
		t.Error("a regular container cannot set restartPolicy")
	}
	if n := len(spec.Containers); n < 1 || spec.Containers[0].Name == ProxyContainerName {
		t.Errorf("the app must be the first container, got %d containers", n)
	}

	// The config file reaches the proxy.
	if got := strings.Join(proxy.Args, " "); got != "run --config /etc/dedupe-proxy/config.yaml" {
		t.Errorf("proxy args %q", got)
	}
	cm, err := objs.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	var mounted bool
	for _, m := range proxy.VolumeMounts {
		if m.MountPath != "/etc/dedupe-proxy" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("ConfigMap %s is not mounted at /etc/dedupe-proxy", cm.Name)
	}
	if sum := d.Spec.Template.Annotations["checksum/config"]; !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(sum) {
		t.Errorf("checksum/config annotation %q", sum)
	}

	// Probes on the port the admin listener really listens on.
	var adminPort *corev1.ContainerPort
	for i := range proxy.Ports {
		if proxy.Ports[i].ContainerPort == cfg.adminPort {
			adminPort = &proxy.Ports[i]
		}
	}
	if adminPort == nil {
		t.Fatalf("proxy exposes no port %d (config admin.listen)", cfg.adminPort)
	}
	for probeName, p := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"liveness": {proxy.LivenessProbe, "/healthz"}, "readiness": {proxy.ReadinessProbe, readyPath}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe is not an HTTP GET", probeName)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || (g.Port.StrVal != adminPort.Name && g.Port.IntVal != adminPort.ContainerPort) {
			t.Errorf("%s probe GETs %s on %s, want %s on the admin port %s", probeName, g.Path, g.Port.String(), p.path, adminPort.Name)
		}
	}

	// Hardened sidecar.
	sc := proxy.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("proxy has no securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("proxy: runAsNonRoot is not true")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("proxy: readOnlyRootFilesystem is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("proxy: allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
		t.Error("proxy: capabilities do not drop ALL")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("proxy: seccompProfile is not RuntimeDefault")
	}
	if proxy.Resources.Requests.Memory().IsZero() || proxy.Resources.Limits.Memory().IsZero() {
		t.Error("proxy has no memory request and limit")
	}

	// Credentials come from Secrets; every variable is a DEDUPE_PROXY_ name
	// the proxy knows how to map (the validate step checks it accepts them).
	for _, e := range proxy.Env {
		if strings.HasPrefix(e.Name, "DEDUPE_PROXY_") && isSecretField(e.Name) && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("%s must come from a Secret", e.Name)
		}
		if errs := validation.IsEnvVarName(e.Name); len(errs) > 0 {
			t.Errorf("env %s: %v", e.Name, errs)
		}
	}
	// The proxy ignores the variables of Service links, and turning them
	// off would hide them from the app too: the chart leaves the default.
	if spec.EnableServiceLinks != nil {
		t.Errorf("enableServiceLinks is set (%v); the chart must leave Kubernetes' default", *spec.EnableServiceLinks)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.shutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v must exceed shutdown_timeout %s", g, cfg.shutdownTimeout)
	}

	// Names that must be unique and well-formed across the pod.
	containers := slices.Concat(spec.InitContainers, spec.Containers)
	seenC, seenP := map[string]bool{}, map[string]bool{}
	for _, c := range containers {
		if seenC[c.Name] {
			t.Errorf("container name %s used twice", c.Name)
		}
		seenC[c.Name] = true
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			t.Errorf("container name %s: %v", c.Name, errs)
		}
		for _, p := range c.Ports {
			if p.Name == "" {
				continue
			}
			if seenP[p.Name] {
				t.Errorf("port name %s used twice in the pod", p.Name)
			}
			seenP[p.Name] = true
			if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
				t.Errorf("port name %s: %v", p.Name, errs)
			}
		}
	}
	seenV := map[string]bool{}
	for _, v := range spec.Volumes {
		if seenV[v.Name] {
			t.Errorf("volume %s defined twice", v.Name)
		}
		seenV[v.Name] = true
	}
	for _, c := range containers {
		for _, m := range c.VolumeMounts {
			if !seenV[m.Name] {
				t.Errorf("container %s mounts undefined volume %s", c.Name, m.Name)
			}
		}
	}
}

func isSecretField(env string) bool {
	for _, s := range []string{"_PASSWORD", "_RABBITMQ_URL", "_REDIS_URL", "_ADMIN_TOKEN", "_APP_URL", "_APP_HEALTH_URL"} {
		if strings.HasSuffix(env, s) {
			return true
		}
	}
	return false
}

func checkSelectors(t *testing.T, d *appsv1.Deployment, objs *Objects, svc *corev1.Service) {
	podLabels := labels.Set(d.Spec.Template.Labels)
	sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
	if !sel.Matches(podLabels) {
		t.Errorf("Deployment selector %v does not match its pod labels", sel)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service selector %v does not match the pods", svc.Spec.Selector)
	}
	proxy, _, _ := Proxy(d)
	var svcPort *corev1.ServicePort
	for i, p := range svc.Spec.Ports {
		for _, cp := range proxy.Ports {
			if p.TargetPort.StrVal == cp.Name || p.TargetPort.IntVal == cp.ContainerPort {
				svcPort = &svc.Spec.Ports[i]
			}
		}
	}
	if svcPort == nil {
		t.Fatal("no Service port targets the proxy's admin port")
	}
	for _, pdb := range objs.PDBs {
		if !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
			t.Errorf("PodDisruptionBudget selector does not match the pods")
		}
		if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
			t.Error("PodDisruptionBudget must set exactly one of minAvailable and maxUnavailable")
		}
	}
}

// checkTestPod: `helm test` GETs /readyz?deps=1 through the admin
// Service: the release works when every source and Redis answer.
func checkTestPod(t *testing.T, objs *Objects, svc *corev1.Service) {
	test := objs.Pods[0]
	if test.Annotations["helm.sh/hook"] != "test" {
		t.Error("the test pod is not a helm test hook")
	}
	url := fmt.Sprintf("http://%s:%d/readyz?deps=1", svc.Name, svc.Spec.Ports[0].Port)
	if !strings.Contains(strings.Join(test.Spec.Containers[0].Command, " "), url) {
		t.Errorf("the test pod does not GET %s", url)
	}
}

func checkNames(t *testing.T, objs *Objects) {
	for _, o := range objs.All {
		if errs := validation.IsDNS1123Subdomain(o.GetName()); len(errs) > 0 {
			t.Errorf("name %q: %v", o.GetName(), errs)
		}
		for k, v := range o.GetLabels() {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				t.Errorf("%s label %s=%s: %v", o.GetName(), k, v, errs)
			}
		}
	}
}

func boolValue(t *testing.T, values string, path ...string) bool {
	t.Helper()
	got, _ := value(t, values, path...).(bool)
	return got
}

// stringValue reads a value from the values file, falling back to the
// chart's values.yaml.
func stringValue(t *testing.T, values string, path ...string) string {
	t.Helper()
	if got, ok := value(t, values, path...).(string); ok {
		return got
	}
	got, _ := value(t, "", path...).(string)
	return got
}

func value(t *testing.T, values string, path ...string) any {
	t.Helper()
	if values == "" {
		values = filepath.Join(chartDir, "values.yaml")
	}
	b, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var v any = m
	for _, p := range path {
		mm, _ := v.(map[string]any)
		v = mm[p]
	}
	return v
}

// TestStrictDecodeRejectsMistypedFields proves the check above is strict:
// a misspelt field, a field at the wrong level and a wrong type all fail.
func TestStrictDecodeRejectsMistypedFields(t *testing.T) {
	out, err := Template(chartDir, "ci", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", `unknown field "spec.template.spec.containers[1].securityContext.readOnlyRootFileSystem"`},
		{"  replicas: 2\n", "  replicas: two\n", "replicas"},
		{"automountServiceAccountToken: false\n      terminationGrace", "automountServiceAccountToken: false\n      restartPolicy: Always\n      restartpolicy: Always\n      terminationGrace", "restartpolicy"},
		{"maxUnavailable: 1\n", "maxUnavailable: 1\n  maxUnavailable: 2\n", "maxUnavailable"},
	} {
		if !strings.Contains(string(out), tc.from) {
			t.Fatalf("render has no %q to corrupt", tc.from)
		}
		_, err := Decode([]byte(strings.Replace(string(out), tc.from, tc.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q -> %q: got error %v, want one mentioning %q", tc.from, tc.to, err, tc.want)
		}
	}
}

// TestRenderFailures: values the chart must refuse, with a message that
// says what to do.
func TestRenderFailures(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "replicaCont=3"}, "additional properties 'replicaCont' not allowed"},
		{[]string{"--set", "config.app.timout=5s"}, "additional properties 'timout' not allowed"},
		{[]string{"--set", "config.seenset.ttl=24"}, "/config/seenset/ttl"},
		{[]string{"--set", "config.log.level=verbose"}, "/config/log/level"},
		{[]string{"--set", "config.admin.listen=127.0.0.1:9090"}, "is loopback"},
		{[]string{"--set-string", "config.admin.listen=9090"}, "must be host:port"},
		{[]string{"--set", "config.seenset.redis.password=s3cret"}, "credentials.redisPassword"},
		{[]string{"--set", "config.seenset.redis.sentinel_password=s3cret"}, "credentials.redisSentinelPassword"},
		{[]string{"--set", "config.admin.token=s3cret"}, "credentials.adminToken"},
		{[]string{"--set", "config.sources[0].name=orders", "--set", "config.sources[0].rabbitmq.queue=orders", "--set", "config.sources[0].rabbitmq.url=amqp://u:p@rabbit:5672/"}, "credentials.sources.orders.rabbitmqUrl"},
		{[]string{"--set", "config.app.url=http://svc:s3cret@127.0.0.1:8080"}, "put the URL in a Secret and name it in credentials.appUrl, which sets DEDUPE_PROXY_APP_URL"},
		{[]string{"--set", "config.app.url=HTTPS://svc:s3cret@127.0.0.1:8443"}, "credentials.appUrl"},
		{[]string{"--set", "config.app.health_url=http://svc:s3cret@127.0.0.1:8080/healthz"}, "credentials.appHealthUrl, which sets DEDUPE_PROXY_APP_HEALTH_URL"},
		{[]string{"--set", "credentials.sources.order.rabbitmqUrl.secretName=s", "--set", "credentials.sources.order.rabbitmqUrl.key=url"}, "no source named order"},
		{[]string{"--set", "credentials.sources.orders.kafkaSaslPassword.secretName=s", "--set", "credentials.sources.orders.kafkaSaslPassword.key=p"}, "source orders has type rabbitmq"},
		{[]string{"--set", "credentials.sources.orders.redisPassword.secretName=s", "--set", "credentials.sources.orders.redisPassword.key=p"}, "credentials.sources.orders.redisPassword: source orders has type rabbitmq"},
		{[]string{"--set", "credentials.sources.orders.redisPasword.secretName=s", "--set", "credentials.sources.orders.redisPasword.key=p"}, "additional properties 'redisPasword' not allowed"},
		{[]string{"--set", "proxy.nativeSidecar=true", "--kube-version", "1.28.0"}, "needs Kubernetes 1.29"},
		{[]string{"--set", "mode=sidecar"}, "/mode"},
		{[]string{"--set", "enableServiceLinks=false"}, "additional properties 'enableServiceLinks' not allowed"},
		{[]string{"--set", "mode=shared", "--set", "credentials.redisPassword.secretName=redis"}, "credentials.redisPassword: mode shared renders no pod; put the variable in a Secret named by the workloads' dedupe-proxy.io/secrets annotation"},
		{[]string{"--set", "mode=shared", "--set", "credentials.redisSentinelPassword.secretName=redis"}, "credentials.redisSentinelPassword: mode shared renders no pod"},
		{[]string{"--set", "mode=shared", "--set", "credentials.sources.orders.rabbitmqUrl.secretName=s", "--set", "credentials.sources.orders.rabbitmqUrl.key=url"}, "mode shared renders no pod"},
		{[]string{"--set", "mode=shared", "--set", "strategy.type=Recreate"}, "strategy: mode shared renders no pod (nor Deployment); set it on the workloads that get the sidecar"},
		{[]string{"--set", "mode=shared", "--set", "extraContainers[0].name=x", "--set", "extraContainers[0].image=x"}, "extraContainers: mode shared renders no pod"},
		// What the API server would refuse, refused at render time.
		{[]string{"--set", "strategy.type=Rolling"}, "/strategy/type"},
		{[]string{"--set", "strategy.type=Recreate", "--set", "strategy.rollingUpdate.maxSurge=1"}, "/strategy"},
		{[]string{"--set", "strategy.rollingUpdate.maxSurge=0", "--set", "strategy.rollingUpdate.maxUnavailable=0"}, "maxSurge and maxUnavailable are both 0"},
		{[]string{"--set-string", "strategy.rollingUpdate.maxSurge=0%", "--set", "strategy.rollingUpdate.maxUnavailable=0"}, "maxSurge and maxUnavailable are both 0"},
		{[]string{"--set-string", "strategy.rollingUpdate.maxSurge=two"}, "/strategy/rollingUpdate/maxSurge"},
		{[]string{"--set", "strategy.rollingUpdte.maxSurge=1"}, "additional properties 'rollingUpdte' not allowed"},
		{[]string{"--set", "mode=shared", "--set", "app.initContainers[0].name=x", "--set", "app.initContainers[0].image=x"}, "app.initContainers: mode shared renders no pod"},
		{[]string{"--set", "extraInitContainers[0].image=busybox"}, "/extraInitContainers/0"},
		{[]string{"--set", "additionalLabels.team=null", "--set-json", `additionalLabels={"n":1}`}, "/additionalLabels/n"},
		{[]string{"--set", "webhook.service.enabled=true"}, "webhook.service.enabled: config.sources has no source of type webhook"},
		{[]string{"--set", "webhook.ingress.enabled=true"}, "webhook.ingress.enabled needs webhook.service.enabled"},
		{[]string{"--set", "credentials.webhookSecrets.bad-name.secretName=s", "--set", "credentials.webhookSecrets.bad-name.key=k"}, "'bad-name' does not match pattern"},
	} {
		_, err := Template(chartDir, "ci", "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	// On the webhook example: what a webhook source's wiring must refuse.
	webhook := filepath.Join(chartDir, "ci", "webhook-values.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "config.sources[1].webhook.listen=127.0.0.1:8088"}, `config.sources[1].webhook.listen "127.0.0.1:8088" is loopback (the proxy's default): nothing outside the pod reaches it`},
		{[]string{"--set", "config.sources[2].webhook.listen=0.0.0.0:8088"}, "another webhook source listens on port 8088"},
		{[]string{"--set", "credentials.webhookSecrets.GITHUB_SECRET.secretName=gh", "--set", "credentials.webhookSecrets.GITHUB_SECRET.key=k"}, "credentials.webhookSecrets.GITHUB_SECRET: no webhook source in config.sources lists env:GITHUB_SECRET in its secrets"},
		{[]string{"--set", "config.sources[1].webhook.secrets[2]=env:STRIPE_NEXT"}, "a webhook source's secrets list env:STRIPE_NEXT, but nothing sets STRIPE_NEXT: name its Secret in credentials.webhookSecrets.STRIPE_NEXT"},
		{[]string{"--set", "config.sources[1].webhook.target.rabbitmq.url=amqp://u:p@rabbit:5672/"}, "config.sources[1].webhook.target.rabbitmq.url holds a password; put the URL in a Secret and name it in credentials.sources.stripe.webhookRabbitmqUrl"},
	} {
		_, err := Template(chartDir, "ci", webhook, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestWebhookCredentials: the signing secrets and the target URL reach
// the proxy as variables from the named Secrets.
func TestWebhookCredentials(t *testing.T) {
	objs := render(t, filepath.Join(chartDir, "ci", "webhook-values.yaml"))
	proxy, _, err := Proxy(objs.Deployments[0])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"STRIPE_WEBHOOK_SECRET":                              {"stripe-webhook", "current"},
		"STRIPE_WEBHOOK_SECRET_OLD":                          {"stripe-webhook", "previous"},
		"DEDUPE_PROXY_SOURCES_1_WEBHOOK_TARGET_RABBITMQ_URL": {"payments-rabbitmq", "url"},
		"DEDUPE_PROXY_SOURCES_2_WEBHOOK_TARGET_RABBITMQ_URL": {"payments-rabbitmq", "url"},
	}
	for _, e := range proxy.Env {
		w, ok := want[e.Name]
		if !ok {
			continue
		}
		if r := e.ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != w[0] || r.SecretKeyRef.Key != w[1] {
			t.Errorf("%s = %+v, want Secret %s key %s", e.Name, e.ValueFrom, w[0], w[1])
		}
		delete(want, e.Name)
	}
	if len(want) > 0 {
		t.Errorf("proxy env lacks %v", slices.Sorted(maps.Keys(want)))
	}
}

// TestAppURLFromSecret: app URLs with a password reach the proxy as
// environment variables from Secrets; a URL without one stays in config.
func TestAppURLFromSecret(t *testing.T) {
	objs := render(t, "", "--set", "credentials.appUrl.secretName=app-auth",
		"--set", "credentials.appHealthUrl.secretName=app-auth", "--set", "config.app.url=http://svc@127.0.0.1:8080")
	proxy, _, err := Proxy(objs.Deployments[0])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"DEDUPE_PROXY_APP_URL": "url", "DEDUPE_PROXY_APP_HEALTH_URL": "health-url"}
	for _, e := range proxy.Env {
		key, ok := want[e.Name]
		if !ok {
			continue
		}
		if r := e.ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != "app-auth" || r.SecretKeyRef.Key != key {
			t.Errorf("%s = %+v, want Secret app-auth key %s", e.Name, e.ValueFrom, key)
		}
		delete(want, e.Name)
	}
	if len(want) > 0 {
		t.Errorf("proxy env lacks %v", slices.Sorted(maps.Keys(want)))
	}
}

// TestSchemaClosesEveryObject: every object the schema defines has
// additionalProperties false (or a schema for map values), so a typo in
// values fails `helm install` instead of being ignored.
func TestSchemaClosesEveryObject(t *testing.T) {
	schema := readSchema(t)
	var walk func(path string, s map[string]any)
	walk = func(path string, s map[string]any) {
		if props, ok := s["properties"].(map[string]any); ok {
			if ap, ok := s["additionalProperties"]; !ok || ap == true {
				t.Errorf("%s: defines properties but allows any other", path)
			}
			for k, v := range props {
				walk(path+"."+k, v.(map[string]any))
			}
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			walk(path+".*", ap)
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
	}
	walk("values", schema)
}

// TestSchemaMatchesConfigExample: the schema of `config` lists exactly the
// fields of config.example.yaml (which documents every field, the Kafka
// block commented out), so the chart neither rejects a real field nor
// offers one the proxy does not have.
func TestSchemaMatchesConfigExample(t *testing.T) {
	raw, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Uncomment the Kafka block of the source.
	var lines []string
	inKafka := false
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "    # kafka:") {
			inKafka = true
		}
		if rest, ok := strings.CutPrefix(l, "    # "); inKafka && ok {
			// Commented-out YAML (a block's key, or its indented
			// fields), not the prose between the blocks.
			if strings.HasPrefix(rest, "  ") || exampleKeyRE.MatchString(rest) {
				l = "    " + rest
			} else {
				l = ""
			}
		}
		lines = append(lines, l)
	}
	var example map[string]any
	if err := yaml.Unmarshal([]byte(strings.Join(lines, "\n")), &example); err != nil {
		t.Fatal(err)
	}
	fromExample := map[string]bool{}
	yamlPaths("", example, fromExample)
	if !fromExample["sources[].kafka.sasl.mechanism"] {
		t.Fatal("could not read the Kafka block of config.example.yaml")
	}
	fromSchema := map[string]bool{}
	schemaPaths("", readSchema(t)["properties"].(map[string]any)["config"].(map[string]any), fromSchema)
	for _, p := range sortedKeys(fromExample) {
		if !fromSchema[p] {
			t.Errorf("config.example.yaml has %s; values.schema.json's config does not", p)
		}
	}
	for _, p := range sortedKeys(fromSchema) {
		if !fromExample[p] {
			t.Errorf("values.schema.json's config has %s; config.example.yaml does not", p)
		}
	}
}

func yamlPaths(prefix string, v any, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			yamlPaths(join(prefix, k), c, out)
		}
	case []any:
		if len(v) > 0 {
			if _, isMap := v[0].(map[string]any); isMap {
				yamlPaths(prefix+"[]", v[0], out)
				return
			}
		}
		out[prefix] = true
	default:
		out[prefix] = true
	}
}

func schemaPaths(prefix string, s map[string]any, out map[string]bool) {
	if props, ok := s["properties"].(map[string]any); ok {
		for k, c := range props {
			schemaPaths(join(prefix, k), c.(map[string]any), out)
		}
		return
	}
	if items, ok := s["items"].(map[string]any); ok && items["properties"] != nil {
		schemaPaths(prefix+"[]", items, out)
		return
	}
	out[prefix] = true
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func sortedKeys(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}

func readSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestValuesCommented: every value in values.yaml has a comment line above
// it (entries of lists are data, not values).
func TestValuesCommented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`^(\s*)(- )?([A-Za-z0-9_]+):`)
	lines := strings.Split(string(b), "\n")
	listIndent := -1
	var missing []string
	for i, l := range lines {
		m := key.FindStringSubmatch(l)
		if m == nil {
			if item := regexp.MustCompile(`^(\s*)- `).FindStringSubmatch(l); item != nil && listIndent < 0 {
				listIndent = len(item[1])
			}
			continue
		}
		indent := len(m[1])
		if listIndent >= 0 && indent <= listIndent && m[2] == "" {
			listIndent = -1
		}
		if m[2] != "" && listIndent < 0 {
			listIndent = indent
		}
		if listIndent >= 0 {
			continue
		}
		prev := ""
		if i > 0 {
			prev = strings.TrimSpace(lines[i-1])
		}
		if !strings.HasPrefix(prev, "#") {
			missing = append(missing, fmt.Sprintf("line %d: %s", i+1, strings.TrimSpace(l)))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("values.yaml %s has no comment above it", m)
	}
}

// TestSentinelCredentials: the Sentinel example's credentials (the ACL
// user for the data servers, the sentinels' own password) reach the proxy
// as variables from the named Secrets.
func TestSentinelCredentials(t *testing.T) {
	objs := render(t, filepath.Join(chartDir, "ci", "redis-sentinel-values.yaml"))
	proxy, _, err := Proxy(objs.Deployments[0])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"DEDUPE_PROXY_SEENSET_REDIS_USERNAME":          {"redis-acl-billing", "username"},
		"DEDUPE_PROXY_SEENSET_REDIS_PASSWORD":          {"redis-acl-billing", "password"},
		"DEDUPE_PROXY_SEENSET_REDIS_SENTINEL_PASSWORD": {"redis-sentinel", "sentinel-password"},
	}
	for _, e := range proxy.Env {
		w, ok := want[e.Name]
		if !ok {
			continue
		}
		if r := e.ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != w[0] || r.SecretKeyRef.Key != w[1] {
			t.Errorf("%s = %+v, want Secret %s key %s", e.Name, e.ValueFrom, w[0], w[1])
		}
		delete(want, e.Name)
	}
	if len(want) > 0 {
		t.Errorf("proxy env lacks %v", slices.Sorted(maps.Keys(want)))
	}
}

// TestRedisSourceCredentials: a type redis source's password, ACL user
// and URL come from the named Secrets as the variables of that source's
// index, the way the seen-set's do; one written into the config (a
// ConfigMap) is refused.
func TestRedisSourceCredentials(t *testing.T) {
	values := filepath.Join(chartDir, "ci", "redis-source-values.yaml")
	objs := render(t, values)
	proxy, _, err := Proxy(objs.Deployments[0])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"DEDUPE_PROXY_SEENSET_REDIS_PASSWORD":   {"redis-seenset", "password"},
		"DEDUPE_PROXY_SOURCES_0_REDIS_USERNAME": {"redis-broker-payments", "username"},
		"DEDUPE_PROXY_SOURCES_0_REDIS_PASSWORD": {"redis-broker-payments", "password"},
		"DEDUPE_PROXY_SOURCES_1_REDIS_URL":      {"redis-broker-orders", "url"},
	}
	for _, e := range proxy.Env {
		if strings.HasPrefix(e.Name, "DEDUPE_PROXY_SOURCES_") && e.ValueFrom == nil {
			t.Errorf("%s is set from the values, not from a Secret", e.Name)
		}
		w, ok := want[e.Name]
		if !ok {
			continue
		}
		if r := e.ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != w[0] || r.SecretKeyRef.Key != w[1] {
			t.Errorf("%s = %+v, want Secret %s key %s", e.Name, e.ValueFrom, w[0], w[1])
		}
		delete(want, e.Name)
	}
	if len(want) > 0 {
		t.Errorf("proxy env lacks %v", slices.Sorted(maps.Keys(want)))
	}
	cfg, err := objs.Config()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"password", "rediss://", "redis://"} {
		if strings.Contains(cfg, s) {
			t.Errorf("config.yaml (a ConfigMap) contains %q:\n%s", s, cfg)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "config.sources[0].redis.password=s3cret"},
			"config.sources[0].redis.password: the config is a ConfigMap; put the password in a Secret and name it in credentials.sources.payments.redisPassword"},
		{[]string{"--set", "config.sources[1].redis.url=redis://:s3cret@redis-broker:6379/0"},
			"config.sources[1].redis.url holds a password; put the URL in a Secret and name it in credentials.sources.orders.redisUrl"},
		{[]string{"--set", "config.sources[1].redis.url=REDISS://app:s3cret@redis-broker:6379"}, "credentials.sources.orders.redisUrl"},
		{[]string{"--set", "credentials.sources.payments.rabbitmqUrl.secretName=s", "--set", "credentials.sources.payments.rabbitmqUrl.key=url"},
			"credentials.sources.payments.rabbitmqUrl: source payments has type redis"},
	} {
		_, err := Template(chartDir, "ci", values, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	// A URL without a password stays in the config.
	if _, err := Template(chartDir, "ci", values, "--set", "config.sources[1].redis.url=rediss://redis-broker:6379/0"); err != nil {
		t.Errorf("a redis URL without a password: %v", err)
	}
}

// exampleKeyRE matches a commented-out block's key in config.example.yaml
// ("kafka:", "webhook:").
var exampleKeyRE = regexp.MustCompile(`^[a-z_]+:`)
