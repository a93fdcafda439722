package inject

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The sidecar in the field order of the chart's template, so a diff
// between a chart render and an injected manifest stays readable.
type container struct {
	Name            string          `yaml:"name"`
	Image           string          `yaml:"image"`
	ImagePullPolicy string          `yaml:"imagePullPolicy"`
	RestartPolicy   string          `yaml:"restartPolicy,omitempty"`
	Args            []string        `yaml:"args,flow"`
	Ports           []port          `yaml:"ports"`
	Env             *yaml.Node      `yaml:"env,omitempty"`
	EnvFrom         []envFrom       `yaml:"envFrom,omitempty"`
	LivenessProbe   probe           `yaml:"livenessProbe"`
	ReadinessProbe  probe           `yaml:"readinessProbe"`
	Resources       resources       `yaml:"resources"`
	SecurityContext securityContext `yaml:"securityContext"`
	VolumeMounts    []volumeMount   `yaml:"volumeMounts"`
}

type port struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
	Protocol      string `yaml:"protocol"`
}

type envFrom struct {
	SecretRef struct {
		Name string `yaml:"name"`
	} `yaml:"secretRef"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	InitialDelaySeconds int `yaml:"initialDelaySeconds"`
	PeriodSeconds       int `yaml:"periodSeconds"`
	TimeoutSeconds      int `yaml:"timeoutSeconds"`
	FailureThreshold    int `yaml:"failureThreshold"`
}

type resources struct {
	Requests struct {
		CPU    string `yaml:"cpu"`
		Memory string `yaml:"memory"`
	} `yaml:"requests"`
	Limits struct {
		Memory string `yaml:"memory"`
	} `yaml:"limits"`
}

type securityContext struct {
	RunAsNonRoot             bool `yaml:"runAsNonRoot"`
	RunAsUser                int  `yaml:"runAsUser"`
	RunAsGroup               int  `yaml:"runAsGroup"`
	ReadOnlyRootFilesystem   bool `yaml:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation bool `yaml:"allowPrivilegeEscalation"`
	Capabilities             struct {
		Drop []string `yaml:"drop,flow"`
	} `yaml:"capabilities"`
	SeccompProfile struct {
		Type string `yaml:"type"`
	} `yaml:"seccompProfile"`
}

type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type volume struct {
	Name      string `yaml:"name"`
	ConfigMap struct {
		Name  string    `yaml:"name"`
		Items []keyPath `yaml:"items,omitempty"`
	} `yaml:"configMap"`
}

type keyPath struct {
	Key  string `yaml:"key"`
	Path string `yaml:"path"`
}

// sidecar builds the container: probes on /healthz and /readyz (with
// ?deps=1 for ReadinessDeps) with the chart's timings, its resources and
// its hardened securityContext (the distroless image's nonroot user,
// read-only root, no capabilities).
func sidecar(p params, env *yaml.Node) container {
	c := container{
		Name:            ContainerName,
		Image:           p.image,
		ImagePullPolicy: "IfNotPresent",
		Args:            []string{"run", "--config", MountPath + "/" + ConfigFile},
		Ports:           []port{{Name: AdminPortName, ContainerPort: p.adminPort, Protocol: "TCP"}},
		Env:             withPodName(env),
		VolumeMounts:    []volumeMount{{Name: VolumeName, MountPath: MountPath, ReadOnly: true}},
	}
	if p.native {
		c.RestartPolicy = "Always"
	}
	for _, s := range p.secrets {
		var e envFrom
		e.SecretRef.Name = s
		c.EnvFrom = append(c.EnvFrom, e)
	}
	c.LivenessProbe = probe{InitialDelaySeconds: 5, PeriodSeconds: 10, TimeoutSeconds: 2, FailureThreshold: 3}
	c.LivenessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Port = "/healthz", AdminPortName
	// /readyz gives up on its own checks after 2s.
	c.ReadinessProbe = probe{InitialDelaySeconds: 2, PeriodSeconds: 5, TimeoutSeconds: 3, FailureThreshold: 3}
	c.ReadinessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Port = p.readinessPath, AdminPortName
	c.Resources.Requests.CPU, c.Resources.Requests.Memory = p.cpuReq, p.memReq
	// No CPU limit: throttling only adds latency.
	c.Resources.Limits.Memory = p.memLimit
	c.SecurityContext = securityContext{RunAsNonRoot: true, RunAsUser: 65532, RunAsGroup: 65532,
		ReadOnlyRootFilesystem: true, AllowPrivilegeEscalation: false}
	c.SecurityContext.Capabilities.Drop = []string{"ALL"}
	c.SecurityContext.SeccompProfile.Type = "RuntimeDefault"
	return c
}

// withPodName adds POD_NAME from the downward API to env (a new list
// when env is nil) unless it is there: a Kafka source's default
// group_instance_id, so a restarted container is the same static member.
func withPodName(env *yaml.Node) *yaml.Node {
	if env == nil || env.Kind != yaml.SequenceNode {
		env = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	}
	for _, e := range env.Content {
		if str(e, "name") == "POD_NAME" {
			return env
		}
	}
	var v yaml.Node
	_ = v.Encode(map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]string{"fieldPath": "metadata.name"}}})
	env.Content = append([]*yaml.Node{&v}, env.Content...)
	return env
}

// apply puts the sidecar, its volume, the label and the annotations into
// the pod. An existing dedupe-proxy container is replaced where it is
// (its env, which annotations cannot express, is kept), so a second run
// changes nothing. at and metaAt are the paths of spec and meta in the
// workload, for errors: a field of a shape inject cannot edit (containers:
// "oops", an alias) is refused rather than replaced, which would drop the
// app's containers from the pod without a word.
func (s *stream) apply(meta, spec *yaml.Node, p params, at, metaAt string) error {
	containers, err := seqField(spec, "containers", at)
	if err != nil {
		return err
	}
	inits, err := seqField(spec, "initContainers", at)
	if err != nil {
		return err
	}
	volumes, err := seqField(spec, "volumes", at)
	if err != nil {
		return err
	}
	labels, err := mappingField(meta, "labels", metaAt)
	if err != nil {
		return err
	}
	annotations, err := mappingField(meta, "annotations", metaAt)
	if err != nil {
		return err
	}
	var oldEnv *yaml.Node
	oldAt, oldIn := -1, ""
	for _, list := range []struct {
		name string
		n    *yaml.Node
	}{{"containers", containers}, {"initContainers", inits}} {
		for i, c := range list.n.Content {
			if c.Kind != yaml.MappingNode {
				return fmt.Errorf("%s.%s[%d]: want a container (a mapping), got %s", at, list.name, i, shape(c))
			}
		}
		for i := 0; i < len(list.n.Content); i++ {
			c := list.n.Content[i]
			if str(c, "name") != ContainerName {
				if err := checkPorts(c, p.adminPort); err != nil {
					return err
				}
				continue
			}
			if oldIn != "" {
				return fmt.Errorf("two containers named %s", ContainerName)
			}
			oldEnv, oldAt, oldIn = get(c, "env"), i, list.name
			list.n.Content = append(list.n.Content[:i], list.n.Content[i+1:]...)
			i--
		}
	}
	var node yaml.Node
	if err := node.Encode(sidecar(p, oldEnv)); err != nil {
		return err
	}
	target, into := containers, "containers"
	if p.native {
		target, into = inits, "initContainers"
	}
	// A new native sidecar goes last among the init containers: it starts
	// after them (migrations need no proxy) and before the app.
	at0 := len(target.Content)
	if oldIn == into && oldAt <= at0 {
		at0 = oldAt
	}
	target.Style &^= yaml.FlowStyle
	target.Content = append(target.Content[:at0], append([]*yaml.Node{&node}, target.Content[at0:]...)...)
	if len(containers.Content) == 0 {
		return fmt.Errorf("pod spec has no containers besides %s", ContainerName)
	}
	for _, l := range []struct {
		key string
		n   *yaml.Node
	}{{"containers", containers}, {"initContainers", inits}, {"volumes", volumes}} {
		if len(l.n.Content) > 0 {
			set(spec, l.key, l.n)
		} else if get(spec, l.key) != nil && l.key != "containers" {
			// An empty list inject emptied (a native sidecar moved back),
			// or a null one: leave the field out, as before.
			del(spec, l.key)
		}
	}

	var vol volume
	vol.Name = VolumeName
	vol.ConfigMap.Name = p.configMap
	if p.configKey != ConfigFile {
		vol.ConfigMap.Items = []keyPath{{Key: p.configKey, Path: ConfigFile}}
	}
	var vnode yaml.Node
	if err := vnode.Encode(vol); err != nil {
		return err
	}
	volumes.Style &^= yaml.FlowStyle
	replaced := false
	for i, v := range volumes.Content {
		if str(v, "name") == VolumeName {
			volumes.Content[i], replaced = &vnode, true
		}
	}
	if !replaced {
		volumes.Content = append(volumes.Content, &vnode)
	}
	set(spec, "volumes", volumes)
	if get(spec, "terminationGracePeriodSeconds") == nil {
		set(spec, "terminationGracePeriodSeconds", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(DefaultGracePeriod)})
	}

	if !labelValueRE.MatchString(p.configMap) {
		return fmt.Errorf("annotation %s: %q cannot be a label value", AnnotationConfig, p.configMap)
	}
	set(labels, LabelConfig, strNode(p.configMap))
	set(meta, "labels", labels)
	if p.checksum != "" {
		set(annotations, AnnotationConfigChecksum, strNode(p.checksum))
		set(meta, "annotations", annotations)
	}
	return nil
}

// checkPorts refuses an app container that uses the admin port: the
// containers of a pod share one network namespace.
func checkPorts(c *yaml.Node, admin int) error {
	for _, pn := range seqItems(get(c, "ports")) {
		if str(pn, "containerPort") == strconv.Itoa(admin) {
			return fmt.Errorf("container %s uses port %d, the proxy's admin port; set annotation %s to another port (and admin.listen to match)", str(c, "name"), admin, AnnotationAdminPort)
		}
		if str(pn, "name") == AdminPortName {
			return fmt.Errorf("container %s has a port named %s, the name the proxy's probes use", str(c, "name"), AdminPortName)
		}
	}
	return nil
}

// Node helpers: mappings are key/value pairs in Content.

func get(n *yaml.Node, path ...string) *yaml.Node {
	for _, k := range path {
		if n == nil {
			return nil
		}
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			n = n.Content[0]
		}
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

func str(n *yaml.Node, path ...string) string {
	v := get(n, path...)
	if v == nil || v.Kind != yaml.ScalarNode {
		return ""
	}
	return v.Value
}

func strNode(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
}

func set(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, strNode(key), v)
}

func del(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// seqField returns m[key] when it is a list, a new empty list when it is
// absent or null (not yet in m: the caller sets it), and an error naming
// at.key for any other shape, which inject cannot edit without losing it.
func seqField(m *yaml.Node, key, at string) (*yaml.Node, error) {
	v := get(m, key)
	switch {
	case v == nil || isNull(v):
		return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}, nil
	case v.Kind == yaml.SequenceNode:
		return v, nil
	}
	return nil, fmt.Errorf("%s.%s: want a list, got %s", at, key, shape(v))
}

// mappingField is seqField for a mapping.
func mappingField(m *yaml.Node, key, at string) (*yaml.Node, error) {
	v := get(m, key)
	switch {
	case v == nil || isNull(v):
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, nil
	case v.Kind == yaml.MappingNode:
		return v, nil
	}
	return nil, fmt.Errorf("%s.%s: want a mapping, got %s", at, key, shape(v))
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// shape says what a node is, for errors.
func shape(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return fmt.Sprintf("an alias (*%s), which inject does not edit: write the value out", n.Value)
	}
	return "an empty document"
}

func seqItems(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func sortStrings(s []string) { sort.Strings(s) }
