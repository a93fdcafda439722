// Package inject adds the dedupe-proxy sidecar to Kubernetes workloads
// whose pod template opts in with the annotation dedupe-proxy.io/inject:
// "true". It works on YAML nodes, not on the Kubernetes API types: the
// proxy is a sidecar image and k8s.io/api would triple its size. The
// container it adds is the one the Helm chart renders (same probes,
// resources and securityContext); helm/charttest compares the two.
//
// Documents that are not injected are written back byte for byte; an
// injected document is re-encoded (two-space indent, comments kept).
// Injecting twice gives the same output as injecting once.
package inject

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Annotations read from the pod template's metadata (a Pod's own metadata).
const (
	Prefix = "dedupe-proxy.io/"
	// AnnotationInject: "true" injects, "false" or absent leaves it.
	AnnotationInject = Prefix + "inject"
	// AnnotationConfig names the ConfigMap holding the proxy's config
	// file; absent: DefaultConfigMap.
	AnnotationConfig = Prefix + "config"
	// AnnotationConfigKey is the key of that file in the ConfigMap.
	AnnotationConfigKey = Prefix + "config-key"
	// AnnotationSecrets lists Secrets (comma-separated) whose keys become
	// the proxy's environment: DEDUPE_PROXY_* overrides, webhook secrets.
	AnnotationSecrets = Prefix + "secrets"
	// AnnotationImage is the proxy image.
	AnnotationImage = Prefix + "image"
	// AnnotationNativeSidecar: "true" runs the proxy as an init container
	// with restartPolicy: Always (Kubernetes 1.29+).
	AnnotationNativeSidecar = Prefix + "native-sidecar"
	// AnnotationAdminPort is the port of the config's admin.listen.
	AnnotationAdminPort = Prefix + "admin-port"
	// AnnotationReadiness is what the sidecar's readiness probe reports:
	// ReadinessProcess (absent) or ReadinessDeps.
	AnnotationReadiness = Prefix + "readiness"
	// Resource overrides of the sidecar.
	AnnotationCPURequest    = Prefix + "cpu-request"
	AnnotationMemoryRequest = Prefix + "memory-request"
	AnnotationMemoryLimit   = Prefix + "memory-limit"
	// AnnotationConfigChecksum is written by inject when the ConfigMap is
	// in the same input, so the pods roll when the config changes.
	AnnotationConfigChecksum = Prefix + "config-checksum"
	// LabelConfig is set on the pods to the ConfigMap's name: the chart's
	// shared mode selects the injected pods by it (Service, ServiceMonitor).
	LabelConfig = Prefix + "config"
)

// What the sidecar looks like; helm/dedupe-proxy/templates/_helpers.tpl
// renders the same container (helm/charttest compares them).
const (
	ContainerName    = "dedupe-proxy"
	VolumeName       = "dedupe-proxy-config"
	MountPath        = "/etc/dedupe-proxy"
	ConfigFile       = "config.yaml"
	AdminPortName    = "proxy-admin"
	DefaultAdminPort = 9090
	// DefaultRepository is the chart's proxy.image.repository. No
	// registry publishes it yet: Result.Unpublished lists the workloads
	// given an image of it, for the command to warn about.
	DefaultRepository = "ghcr.io/dedupe-proxy/dedupe-proxy"
	// DefaultImage is the chart's proxy.image.repository:appVersion.
	DefaultImage = DefaultRepository + ":0.1.0"
	// DefaultConfigMap is the ConfigMap of a workload without a
	// dedupe-proxy.io/config annotation: the one the chart renders in mode
	// shared as release dedupe-proxy (its fullname). So the single
	// annotation dedupe-proxy.io/inject: "true" opts in, as with linkerd
	// or Dapr.
	DefaultConfigMap = "dedupe-proxy"
	// DefaultGracePeriod is set when a pod has no
	// terminationGracePeriodSeconds: above the proxy's default
	// shutdown_timeout (30s), so in-flight messages finish on SIGTERM.
	DefaultGracePeriod = 45
)

// Values of AnnotationReadiness, and the probe path of each.
const (
	// ReadinessProcess: the pod is ready while the proxy process serves,
	// whatever Redis and the broker do. A pod's readiness puts it in or
	// out of every Service that selects it, the app's included: a Redis
	// blip must not take every replica out of the app's Service (the
	// proxy holds messages unacked meanwhile).
	ReadinessProcess = "process"
	// ReadinessDeps: the pod is ready only while every source is
	// connected and Redis answers, for pods that serve nothing else.
	ReadinessDeps = "deps"

	ReadinessProcessPath = "/readyz"
	ReadinessDepsPath    = "/readyz?deps=1"
)

var known = map[string]bool{
	AnnotationInject: true, AnnotationConfig: true, AnnotationConfigKey: true, AnnotationSecrets: true,
	AnnotationImage: true, AnnotationNativeSidecar: true, AnnotationAdminPort: true, AnnotationReadiness: true,
	AnnotationCPURequest: true, AnnotationMemoryRequest: true, AnnotationMemoryLimit: true,
	AnnotationConfigChecksum: true,
}

// Options are the defaults for workloads whose annotations do not say.
type Options struct {
	// Image is the proxy image; empty: DefaultImage.
	Image string
}

// Result says what Stream did.
type Result struct {
	// Documents counts the YAML documents read (List items not counted).
	Documents int
	// Injected names each injected workload as Kind/namespace/name.
	Injected []string
	// Unpublished names the injected workloads whose sidecar runs an
	// image of DefaultRepository, which no registry publishes yet: their
	// pods cannot pull it.
	Unpublished []string
	// WrongConfigMap has one line per injected workload that mounts a
	// ConfigMap the input lacks while it holds a dedupe-proxy ConfigMap
	// under another name (the chart's, rendered as another release): the
	// pods would wait in ContainerCreating for a ConfigMap that never
	// comes. Each line names the annotation that fixes it.
	WrongConfigMap []string
	// NoConfigMap names, as "<workload>: <ConfigMap>", the injected
	// workloads whose ConfigMap is not in an input that holds no
	// dedupe-proxy ConfigMap at all: it must exist in their namespace
	// before their pods can start.
	NoConfigMap []string
}

// isChartConfigMap reports whether labels are those of the ConfigMap the
// chart renders: its app.kubernetes.io/name, or its helm.sh/chart should
// nameOverride have changed the name.
func isChartConfigMap(labels *yaml.Node) bool {
	return str(labels, "app.kubernetes.io/name") == ContainerName || strings.HasPrefix(str(labels, "helm.sh/chart"), ContainerName+"-")
}

// Stream reads a multi-document YAML stream and returns it with the
// sidecar added to every opted-in workload. Any error names the document
// and workload; nothing is written then.
func Stream(in []byte, o Options) ([]byte, Result, error) {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	var res Result
	chunks := split(in)
	docs := make([][]*yaml.Node, len(chunks))
	for i, c := range chunks {
		nodes, err := decodeAll(c.body)
		if err != nil {
			return nil, res, fmt.Errorf("document %d (line %d): %w", i+1, c.line, err)
		}
		docs[i] = nodes
	}
	s := &stream{o: o, configMaps: map[string]*yaml.Node{}}
	for _, nodes := range docs {
		for _, n := range nodes {
			each(n, s.collect)
		}
	}
	var out bytes.Buffer
	for i, c := range chunks {
		changed := false
		for _, n := range docs[i] {
			res.Documents++
			var errs []error
			each(n, func(obj *yaml.Node) {
				ok, err := s.workload(obj)
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					changed = true
					res.Injected = append(res.Injected, describe(obj))
				}
			})
			if err := errors.Join(errs...); err != nil {
				return nil, res, fmt.Errorf("document %d (line %d): %w", i+1, c.line, err)
			}
		}
		if !changed {
			out.Write(c.sep)
			out.Write(c.body)
			continue
		}
		if len(c.sep) > 0 {
			out.WriteString("---\n")
		}
		if err := encodeAll(&out, docs[i]); err != nil {
			return nil, res, fmt.Errorf("document %d (line %d): %w", i+1, c.line, err)
		}
	}
	res.Unpublished = s.unpublished
	res.WrongConfigMap, res.NoConfigMap = s.wrongConfigMap, s.noConfigMap
	return out.Bytes(), res, nil
}

// Unpublished says whether image is one of DefaultRepository, which no
// registry publishes yet.
func Unpublished(image string) bool {
	return image == DefaultRepository || strings.HasPrefix(image, DefaultRepository+":") || strings.HasPrefix(image, DefaultRepository+"@")
}

// chunk is one document's text: the "---" line that opened it (if any)
// and what follows up to the next one.
type chunk struct {
	sep, body []byte
	line      int
}

var sepRE = regexp.MustCompile(`^---(\s.*)?$`)

// split cuts the stream at "---" lines. A separator carrying content
// ("--- {a: 1}") stays in the body so that the YAML decoder sees it.
func split(in []byte) []chunk {
	var chunks []chunk
	cur := chunk{line: 1}
	line := 0
	for len(in) > 0 {
		line++
		i := bytes.IndexByte(in, '\n')
		var l []byte
		if i < 0 {
			l, in = in, nil
		} else {
			l, in = in[:i+1], in[i+1:]
		}
		text := strings.TrimRight(string(l), "\r\n")
		if sepRE.MatchString(text) {
			if len(cur.sep) > 0 || len(cur.body) > 0 {
				chunks = append(chunks, cur)
			}
			cur = chunk{line: line}
			rest := strings.TrimSpace(strings.TrimPrefix(text, "---"))
			if rest == "" || strings.HasPrefix(rest, "#") {
				cur.sep = l
			} else {
				cur.body = append(cur.body, l...)
			}
			continue
		}
		cur.body = append(cur.body, l...)
	}
	if len(cur.sep) > 0 || len(cur.body) > 0 {
		chunks = append(chunks, cur)
	}
	return chunks
}

func decodeAll(b []byte) ([]*yaml.Node, error) {
	// Comments and a "..." end marker alone make an empty document, which
	// the decoder refuses.
	empty := true
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "..." && !strings.HasPrefix(l, "#") {
			empty = false
		}
	}
	if empty {
		return nil, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var nodes []*yaml.Node
	for {
		n := &yaml.Node{}
		err := dec.Decode(n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nodes, nil
			}
			return nil, fmt.Errorf("invalid YAML: %w", err)
		}
		nodes = append(nodes, n)
	}
}

func encodeAll(w *bytes.Buffer, nodes []*yaml.Node) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	for _, n := range nodes {
		if err := enc.Encode(n); err != nil {
			return err
		}
	}
	return enc.Close()
}

// each calls f on the object of a document and, for a List kind
// (v1 List, DeploymentList, ...), on each of its items.
func each(doc *yaml.Node, f func(*yaml.Node)) {
	obj := doc
	if obj.Kind == yaml.DocumentNode && len(obj.Content) == 1 {
		obj = obj.Content[0]
	}
	if obj.Kind != yaml.MappingNode {
		return
	}
	if strings.HasSuffix(str(obj, "kind"), "List") {
		if items := get(obj, "items"); items != nil && items.Kind == yaml.SequenceNode {
			for _, it := range items.Content {
				each(it, f)
			}
			return
		}
	}
	f(obj)
}

type stream struct {
	o              Options
	configMaps     map[string]*yaml.Node // "namespace/name" -> data mapping
	chartMaps      []nsName              // the chart's ConfigMaps in the input
	unpublished    []string              // Result.Unpublished
	wrongConfigMap []string              // Result.WrongConfigMap
	noConfigMap    []string              // Result.NoConfigMap
}

type nsName struct{ namespace, name string }

func (s *stream) collect(obj *yaml.Node) {
	if str(obj, "kind") != "ConfigMap" || str(obj, "apiVersion") != "v1" {
		return
	}
	ns, name := str(obj, "metadata", "namespace"), str(obj, "metadata", "name")
	if data := get(obj, "data"); data != nil && data.Kind == yaml.MappingNode {
		s.configMaps[ns+"/"+name] = data
	}
	if isChartConfigMap(get(obj, "metadata", "labels")) {
		s.chartMaps = append(s.chartMaps, nsName{ns, name})
	}
}

// checkConfigMap notes a workload whose ConfigMap the input lacks. A
// rendered chart carries no namespace (helm template sets none), so an
// empty namespace on either side matches any.
func (s *stream) checkConfigMap(obj *yaml.Node, p params, annPath string) {
	ns := str(obj, "metadata", "namespace")
	if s.configMaps[ns+"/"+p.configMap] != nil {
		return
	}
	var names []string
	for _, c := range s.chartMaps {
		if (c.namespace == ns || c.namespace == "" || ns == "") && c.name != p.configMap && !slices.Contains(names, c.name) {
			names = append(names, c.name)
		}
	}
	name := describe(obj)
	if len(names) == 0 {
		s.noConfigMap = append(s.noConfigMap, name+": "+p.configMap)
		return
	}
	fix := fmt.Sprintf("add %s: %s to %s.annotations", AnnotationConfig, names[0], annPath)
	if len(names) > 1 {
		fix = fmt.Sprintf("add %s: <one of them> to %s.annotations", AnnotationConfig, annPath)
	}
	s.wrongConfigMap = append(s.wrongConfigMap, fmt.Sprintf("%s mounts ConfigMap %s, which is not in the input, but the input holds the dedupe-proxy ConfigMap %s: %s",
		name, p.configMap, strings.Join(names, ", "), fix))
}

func describe(obj *yaml.Node) string {
	ns := str(obj, "metadata", "namespace")
	if ns != "" {
		ns += "/"
	}
	return str(obj, "kind") + "/" + ns + str(obj, "metadata", "name")
}

// podTemplate returns the metadata and spec of the pod a workload runs;
// ok is false for kinds that run no pod inject knows.
func podTemplate(obj *yaml.Node) (meta, spec *yaml.Node, path string, ok bool) {
	group, _, _ := strings.Cut(str(obj, "apiVersion"), "/")
	kind := str(obj, "kind")
	switch {
	case kind == "Pod" && str(obj, "apiVersion") == "v1":
		return get(obj, "metadata"), get(obj, "spec"), "metadata", true
	case group == "apps" && (kind == "Deployment" || kind == "StatefulSet" || kind == "DaemonSet" || kind == "ReplicaSet"),
		group == "batch" && kind == "Job":
		t := get(obj, "spec", "template")
		return get(t, "metadata"), get(t, "spec"), "spec.template.metadata", true
	case group == "batch" && kind == "CronJob":
		t := get(obj, "spec", "jobTemplate", "spec", "template")
		return get(t, "metadata"), get(t, "spec"), "spec.jobTemplate.spec.template.metadata", true
	}
	return nil, nil, "", false
}

// specPath is the path from a workload to its pod spec.
func specPath(obj *yaml.Node) []string {
	switch str(obj, "kind") {
	case "Pod":
		return []string{"spec"}
	case "CronJob":
		return []string{"spec", "jobTemplate", "spec", "template", "spec"}
	}
	return []string{"spec", "template", "spec"}
}

// workload injects obj when its pod template asks for it.
func (s *stream) workload(obj *yaml.Node) (bool, error) {
	meta, spec, path, ok := podTemplate(obj)
	name := describe(obj)
	if !ok {
		// An opt-in on a kind inject does not know (an Argo Rollout, a
		// custom resource) must not pass silently: the user believes
		// those messages are deduplicated.
		if v := str(obj, "spec", "template", "metadata", "annotations", AnnotationInject); v == "true" {
			return false, fmt.Errorf("%s: %s %q, but inject handles Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob only", name, AnnotationInject, v)
		}
		return false, nil
	}
	ann := get(meta, "annotations")
	want, err := boolAnnotation(ann, AnnotationInject)
	if err != nil {
		return false, fmt.Errorf("%s: %s.annotations: %w", name, path, err)
	}
	if want == nil || !*want {
		if path != "metadata" && str(obj, "metadata", "annotations", AnnotationInject) == "true" && want == nil {
			return false, fmt.Errorf("%s: %s is on the %s's own metadata; inject reads the pod template's: move it to %s.annotations",
				name, AnnotationInject, str(obj, "kind"), path)
		}
		return false, nil
	}
	at := strings.Join(specPath(obj), ".")
	if spec == nil {
		return false, fmt.Errorf("%s: %s: no pod spec", name, at)
	}
	if spec.Kind != yaml.MappingNode {
		return false, fmt.Errorf("%s: %s: want a mapping (the pod spec), got %s", name, at, shape(spec))
	}
	// A flow-style ancestor ({...}) would print the whole sidecar on one
	// line; block style from the top down to the pod spec.
	for n, k := obj, 0; n != nil && n != spec; k++ {
		n.Style &^= yaml.FlowStyle
		n = get(n, specPath(obj)[k])
	}
	spec.Style &^= yaml.FlowStyle
	p, err := s.params(obj, ann, spec)
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	if err := s.apply(meta, spec, p, at, path); err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	if Unpublished(p.image) {
		s.unpublished = append(s.unpublished, name)
	}
	s.checkConfigMap(obj, p, path)
	return true, nil
}

// params is what the annotations ask for.
type params struct {
	configMap, configKey     string
	secrets                  []string
	image                    string
	native                   bool
	adminPort                int
	readinessPath            string
	cpuReq, memReq, memLimit string
	checksum                 string
}

var (
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	configKeyRE      = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	quantityRE       = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$`)
	imageRE          = regexp.MustCompile(`^[^\s]+$`)
	labelValueRE     = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

func (s *stream) params(obj, ann, spec *yaml.Node) (params, error) {
	p := params{configKey: ConfigFile, image: s.o.Image, adminPort: DefaultAdminPort, readinessPath: ReadinessProcessPath,
		cpuReq: "50m", memReq: "64Mi", memLimit: "256Mi"}
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("annotation %s: "+format, append([]any{key}, a...)...))
	}
	for i := 0; i+1 < len(ann.Content); i += 2 {
		k, v := ann.Content[i], ann.Content[i+1]
		if !strings.HasPrefix(k.Value, Prefix) {
			continue
		}
		if !known[k.Value] {
			bad(k.Value, "unknown; known: %s", strings.Join(knownList(), ", "))
			continue
		}
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			bad(k.Value, "must be a string (quote it), got %s", v.Value)
		}
	}
	p.configMap = str(ann, AnnotationConfig)
	switch {
	case get(ann, AnnotationConfig) == nil:
		p.configMap = DefaultConfigMap
	case p.configMap == "":
		bad(AnnotationConfig, "empty: name the ConfigMap holding the proxy's %s, or leave the annotation out for %s", ConfigFile, DefaultConfigMap)
	case len(p.configMap) > 63 || !dns1123Subdomain.MatchString(p.configMap):
		// 63, not 253: the name is also the value of the pods' label.
		bad(AnnotationConfig, "%q is not a ConfigMap name of at most 63 characters", p.configMap)
	}
	if v := str(ann, AnnotationConfigKey); v != "" {
		if !configKeyRE.MatchString(v) {
			bad(AnnotationConfigKey, "%q is not a ConfigMap key", v)
		}
		p.configKey = v
	}
	if v := str(ann, AnnotationSecrets); v != "" {
		for _, n := range strings.Split(v, ",") {
			n = strings.TrimSpace(n)
			if len(n) > 253 || !dns1123Subdomain.MatchString(n) {
				bad(AnnotationSecrets, "%q is not a Secret name (want a comma-separated list of names)", n)
				continue
			}
			p.secrets = append(p.secrets, n)
		}
	}
	if v := str(ann, AnnotationImage); v != "" {
		if !imageRE.MatchString(v) {
			bad(AnnotationImage, "%q is not an image reference", v)
		}
		p.image = v
	}
	native, err := boolAnnotation(ann, AnnotationNativeSidecar)
	if err != nil {
		errs = append(errs, err)
	}
	// A Job's pod (a Pod that does not restart) completes when all its
	// containers exit; the proxy never does, so it must be a native
	// sidecar, which the kubelet stops once the app's containers are done.
	ends := str(obj, "kind") == "Job" || str(obj, "kind") == "CronJob" ||
		(str(obj, "kind") == "Pod" && str(spec, "restartPolicy") != "" && str(spec, "restartPolicy") != "Always")
	switch {
	case native != nil:
		p.native = *native
		if ends && !p.native {
			bad(AnnotationNativeSidecar, `"false": a regular sidecar container never exits, so the %s would never complete; use "true" (Kubernetes 1.29+)`, str(obj, "kind"))
		}
	case ends:
		p.native = true
	}
	if v := str(ann, AnnotationAdminPort); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			bad(AnnotationAdminPort, "%q is not a port number", v)
		} else {
			p.adminPort = n
		}
	}
	switch v := str(ann, AnnotationReadiness); v {
	case "", ReadinessProcess:
	case ReadinessDeps:
		p.readinessPath = ReadinessDepsPath
	default:
		bad(AnnotationReadiness, "must be %q (ready while the proxy runs) or %q (ready while its broker and Redis are up), got %q", ReadinessProcess, ReadinessDeps, v)
	}
	for _, q := range []struct {
		key string
		to  *string
	}{{AnnotationCPURequest, &p.cpuReq}, {AnnotationMemoryRequest, &p.memReq}, {AnnotationMemoryLimit, &p.memLimit}} {
		if v := str(ann, q.key); v != "" {
			if !quantityRE.MatchString(v) {
				bad(q.key, "%q is not a Kubernetes quantity (e.g. 100m, 128Mi)", v)
			}
			*q.to = v
		}
	}
	if len(errs) > 0 {
		return p, errors.Join(errs...)
	}
	// The ConfigMap in the same input: check the admin listener the
	// probes depend on, and roll the pods when the config changes.
	if data := s.configMaps[str(obj, "metadata", "namespace")+"/"+p.configMap]; data != nil {
		text := get(data, p.configKey)
		if text == nil {
			return p, fmt.Errorf("ConfigMap %s has no key %s (annotation %s)", p.configMap, p.configKey, AnnotationConfigKey)
		}
		if err := checkAdmin(text.Value, p.adminPort); err != nil {
			return p, fmt.Errorf("ConfigMap %s, %s: %w", p.configMap, p.configKey, err)
		}
		sum := sha256.Sum256([]byte(text.Value))
		p.checksum = hex.EncodeToString(sum[:])
	}
	return p, nil
}

func knownList() []string {
	var l []string
	for k := range known {
		if k != AnnotationConfigChecksum {
			l = append(l, k)
		}
	}
	sortStrings(l)
	return l
}

// checkAdmin refuses a config whose admin listener the kubelet cannot
// probe: absent (the default is loopback), loopback, or on another port.
func checkAdmin(text string, port int) error {
	var cfg struct {
		Admin struct {
			Listen *string `yaml:"listen"`
		} `yaml:"admin"`
	}
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	if cfg.Admin.Listen == nil {
		return fmt.Errorf("admin.listen is not set, and its default 127.0.0.1:9090 is loopback: the kubelet's probes cannot reach it; set admin.listen: 0.0.0.0:%d", port)
	}
	listen := *cfg.Admin.Listen
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("admin.listen %q: %v", listen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return fmt.Errorf("admin.listen %q is loopback: the kubelet's probes cannot reach it; use 0.0.0.0:%s", listen, p)
	}
	if p != strconv.Itoa(port) {
		return fmt.Errorf("admin.listen %q is not on port %d, where the probes go; set annotation %s: %q", listen, port, AnnotationAdminPort, p)
	}
	return nil
}

func boolAnnotation(ann *yaml.Node, key string) (*bool, error) {
	v := get(ann, key)
	if v == nil {
		return nil, nil
	}
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		return nil, fmt.Errorf("annotation %s: must be the string \"true\" or \"false\" (quoted: annotations are strings), got %s", key, v.Value)
	}
	switch v.Value {
	case "true":
		t := true
		return &t, nil
	case "false":
		f := false
		return &f, nil
	}
	return nil, fmt.Errorf("annotation %s: must be \"true\" or \"false\", got %q", key, v.Value)
}
