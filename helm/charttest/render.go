package charttest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// ProxyContainerName is the sidecar's container name in the chart.
const ProxyContainerName = "dedupe-proxy"

// ConfigKey is the ConfigMap key holding the proxy's config file.
const ConfigKey = "config.yaml"

// Helm is the helm binary: $HELM, else helm on PATH.
func Helm() string {
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	return "helm"
}

// Template runs `helm template <release> <chart> [-f values] [args...]` and
// returns the manifests; the error carries helm's stderr.
func Template(chart, release, values string, args ...string) ([]byte, error) {
	full := []string{"template", release, chart}
	if values != "" {
		full = append(full, "-f", values)
	}
	full = append(full, args...)
	cmd := exec.Command(Helm(), full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(full, " "), err, stderr.String())
	}
	return out, nil
}

// Objects is one render, each manifest decoded into its API type.
type Objects struct {
	Deployments     []*appsv1.Deployment
	ConfigMaps      []*corev1.ConfigMap
	Services        []*corev1.Service
	ServiceAccounts []*corev1.ServiceAccount
	PDBs            []*policyv1.PodDisruptionBudget
	ServiceMonitors []*monitoringv1.ServiceMonitor
	// Pods are the `helm test` hook pods.
	Pods []*corev1.Pod
	// All lists every object's metadata in render order.
	All []metav1.Object
}

// Decode splits a multi-document render and strictly decodes each
// document into the API type of its apiVersion and kind: an unknown field,
// a duplicate field or a wrong type is an error, and so is a kind the
// chart is not expected to render.
func Decode(manifests []byte) (*Objects, error) {
	objs := &Objects{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	var errs []error
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("split manifests: %w", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		if err := objs.add(doc); err != nil {
			errs = append(errs, err)
		}
	}
	return objs, errors.Join(errs...)
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

func (o *Objects) add(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("read apiVersion/kind: %w\n%s", err, doc)
	}
	var obj metav1.Object
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/Deployment":
		v := &appsv1.Deployment{}
		o.Deployments, obj = append(o.Deployments, v), v
	case "v1/ConfigMap":
		v := &corev1.ConfigMap{}
		o.ConfigMaps, obj = append(o.ConfigMaps, v), v
	case "v1/Service":
		v := &corev1.Service{}
		o.Services, obj = append(o.Services, v), v
	case "v1/ServiceAccount":
		v := &corev1.ServiceAccount{}
		o.ServiceAccounts, obj = append(o.ServiceAccounts, v), v
	case "v1/Pod":
		v := &corev1.Pod{}
		o.Pods, obj = append(o.Pods, v), v
	case "policy/v1/PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		o.PDBs, obj = append(o.PDBs, v), v
	case "monitoring.coreos.com/v1/ServiceMonitor":
		v := &monitoringv1.ServiceMonitor{}
		o.ServiceMonitors, obj = append(o.ServiceMonitors, v), v
	default:
		return fmt.Errorf("unexpected kind %s %s: add it to charttest.Decode", tm.APIVersion, tm.Kind)
	}
	if err := decodeStrict(doc, obj); err != nil {
		return fmt.Errorf("%s %s: %w", tm.Kind, obj.GetName(), err)
	}
	o.All = append(o.All, obj)
	return nil
}

// decodeStrict decodes as the API server does with strict field
// validation: YAML to JSON refusing duplicate keys, then sigs.k8s.io/json,
// which matches field names case-sensitively and reports unknown and
// duplicate fields. (encoding/json, and so yaml.UnmarshalStrict, matches
// names case-insensitively: readOnlyRootFileSystem would pass.)
func decodeStrict(doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// Proxy returns the dedupe-proxy container of d's pod template and whether
// it runs as a native sidecar (in initContainers).
func Proxy(d *appsv1.Deployment) (c *corev1.Container, native bool, err error) {
	spec := &d.Spec.Template.Spec
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == ProxyContainerName {
			c, native = &spec.InitContainers[i], true
		}
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == ProxyContainerName {
			if c != nil {
				return nil, false, errors.New("dedupe-proxy is both an init container and a container")
			}
			c = &spec.Containers[i]
		}
	}
	if c == nil {
		return nil, false, fmt.Errorf("deployment %s has no %s container", d.Name, ProxyContainerName)
	}
	return c, native, nil
}

// Config returns the proxy's config.yaml from the render's ConfigMap.
func (o *Objects) Config() (string, error) {
	if len(o.ConfigMaps) != 1 {
		return "", fmt.Errorf("want 1 ConfigMap, got %d", len(o.ConfigMaps))
	}
	cfg, ok := o.ConfigMaps[0].Data[ConfigKey]
	if !ok {
		return "", fmt.Errorf("ConfigMap %s has no %s", o.ConfigMaps[0].Name, ConfigKey)
	}
	return cfg, nil
}

// ValidationEnv is the proxy container's environment as `dedupe-proxy
// validate` should see it: literal values as they are, values from Secrets
// (which a render cannot know) as placeholders the proxy accepts. Passing
// the names matters: the proxy rejects an unknown DEDUPE_PROXY_* variable,
// and a credential aimed at a field the config lacks fails here.
func ValidationEnv(c *corev1.Container) []string {
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = placeholder(e.Name)
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

func placeholder(name string) string {
	switch {
	case strings.HasSuffix(name, "_RABBITMQ_URL"):
		return "amqp://user:placeholder@rabbitmq:5672/"
	case strings.HasSuffix(name, "_ADDRS"), strings.HasSuffix(name, "_BROKERS"):
		return "placeholder:1234"
	case strings.HasSuffix(name, "_URL"):
		return "http://placeholder:8080"
	}
	return "placeholder"
}
