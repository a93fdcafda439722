package charttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
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
	PrometheusRules []*monitoringv1.PrometheusRule
	Ingresses       []*networkingv1.Ingress
	// Pods are the `helm test` hook pods (or Pods of an inject test).
	Pods []*corev1.Pod
	// Workloads inject handles besides Deployments and Pods.
	StatefulSets []*appsv1.StatefulSet
	DaemonSets   []*appsv1.DaemonSet
	ReplicaSets  []*appsv1.ReplicaSet
	Jobs         []*batchv1.Job
	CronJobs     []*batchv1.CronJob
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
		// Markers alone ("---" after another, "...") make an empty document.
		if l := strings.TrimSpace(line); !strings.HasPrefix(l, "#") && l != "---" && l != "..." {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

func (o *Objects) add(doc []byte) error {
	var tm struct {
		metav1.TypeMeta
		Items []json.RawMessage `json:"items"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("read apiVersion/kind: %w\n%s", err, doc)
	}
	if tm.APIVersion == "v1" && tm.Kind == "List" {
		var errs []error
		for _, it := range tm.Items {
			errs = append(errs, o.add(it))
		}
		return errors.Join(errs...)
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
	case "monitoring.coreos.com/v1/PrometheusRule":
		v := &monitoringv1.PrometheusRule{}
		o.PrometheusRules, obj = append(o.PrometheusRules, v), v
	case "networking.k8s.io/v1/Ingress":
		v := &networkingv1.Ingress{}
		o.Ingresses, obj = append(o.Ingresses, v), v
	case "apps/v1/StatefulSet":
		v := &appsv1.StatefulSet{}
		o.StatefulSets, obj = append(o.StatefulSets, v), v
	case "apps/v1/DaemonSet":
		v := &appsv1.DaemonSet{}
		o.DaemonSets, obj = append(o.DaemonSets, v), v
	case "apps/v1/ReplicaSet":
		v := &appsv1.ReplicaSet{}
		o.ReplicaSets, obj = append(o.ReplicaSets, v), v
	case "batch/v1/Job":
		v := &batchv1.Job{}
		o.Jobs, obj = append(o.Jobs, v), v
	case "batch/v1/CronJob":
		v := &batchv1.CronJob{}
		o.CronJobs, obj = append(o.CronJobs, v), v
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

// PodTemplate is a workload's name and the pod it runs.
type PodTemplate struct {
	Kind, Name string
	Meta       *metav1.ObjectMeta
	Spec       *corev1.PodSpec
}

// PodTemplates lists the pod of every workload in the render.
func (o *Objects) PodTemplates() []PodTemplate {
	var out []PodTemplate
	for _, v := range o.Deployments {
		out = append(out, PodTemplate{"Deployment", v.Name, &v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec})
	}
	for _, v := range o.StatefulSets {
		out = append(out, PodTemplate{"StatefulSet", v.Name, &v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec})
	}
	for _, v := range o.DaemonSets {
		out = append(out, PodTemplate{"DaemonSet", v.Name, &v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec})
	}
	for _, v := range o.ReplicaSets {
		out = append(out, PodTemplate{"ReplicaSet", v.Name, &v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec})
	}
	for _, v := range o.Jobs {
		out = append(out, PodTemplate{"Job", v.Name, &v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec})
	}
	for _, v := range o.CronJobs {
		t := &v.Spec.JobTemplate.Spec.Template
		out = append(out, PodTemplate{"CronJob", v.Name, &t.ObjectMeta, &t.Spec})
	}
	for _, v := range o.Pods {
		out = append(out, PodTemplate{"Pod", v.Name, &v.ObjectMeta, &v.Spec})
	}
	return out
}

// Proxy returns the dedupe-proxy container of d's pod template and whether
// it runs as a native sidecar (in initContainers).
func Proxy(d *appsv1.Deployment) (c *corev1.Container, native bool, err error) {
	return ProxyIn(&d.Spec.Template.Spec, "deployment "+d.Name)
}

// ProxyIn is Proxy for any pod spec; what names it in errors.
func ProxyIn(spec *corev1.PodSpec, what string) (c *corev1.Container, native bool, err error) {
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
		return nil, false, fmt.Errorf("%s has no %s container", what, ProxyContainerName)
	}
	return c, native, nil
}

// Config returns the proxy's config.yaml from the render's ConfigMap.
func (o *Objects) Config() (string, error) {
	cm, err := o.ConfigMap()
	if err != nil {
		return "", err
	}
	return cm.Data[ConfigKey], nil
}

// ConfigMap is the render's one ConfigMap holding the proxy's config.yaml
// (the dashboard's ConfigMap holds a .json).
func (o *Objects) ConfigMap() (*corev1.ConfigMap, error) {
	var found []*corev1.ConfigMap
	for _, cm := range o.ConfigMaps {
		if _, ok := cm.Data[ConfigKey]; ok {
			found = append(found, cm)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("want 1 ConfigMap with %s, got %d", ConfigKey, len(found))
	}
	return found[0], nil
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
	case strings.HasSuffix(name, "_REDIS_URL"):
		return "redis://user:placeholder@redis:6379/0"
	case strings.HasSuffix(name, "_ADDRS"), strings.HasSuffix(name, "_BROKERS"):
		return "placeholder:1234"
	case strings.HasSuffix(name, "_URL"):
		return "http://placeholder:8080"
	}
	return "placeholder"
}
