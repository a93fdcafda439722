package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// EnvPrefix starts every override variable.
const EnvPrefix = "DEDUPE_PROXY_"

// EnvConfigFile names the config file when --config is not given.
const EnvConfigFile = EnvPrefix + "CONFIG"

// EnvPodName is the pod's name, the default kafka.group_instance_id.
const EnvPodName = "POD_NAME"

// Load reads path, applies environment overrides from environ (os.Environ()
// when nil) and validates. The returned error lists every problem, one per
// line, each starting with its field path.
func Load(path string, environ []string) (*Config, error) {
	cfg, _, err := LoadWithOrigins(path, environ)
	return cfg, err
}

// LoadWithOrigins is Load that also says where each setting came from.
// An error caused by an environment variable names it.
func LoadWithOrigins(path string, environ []string) (*Config, Origins, error) {
	if environ == nil {
		environ = os.Environ()
	}
	env := envMap(environ)

	// Our own viper instance: the global one would leak settings between
	// the tests that load many files in one process.
	v := viper.New()
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	origins := Origins{}
	origins.fromFile(v.AllSettings(), "")

	cfg := Default()
	var errs []error
	used := map[string]bool{EnvConfigFile: true}

	// viper's AutomaticEnv only feeds Unmarshal for keys it already knows
	// (spf13/viper#188) and always reads the process environment, so every
	// leaf path is looked up in environ explicitly; Set outranks the file.
	for _, p := range leafPaths(reflect.TypeOf(Config{}), "") {
		name := envName(p)
		if val, ok := env[name]; ok {
			used[name] = true
			v.Set(p, val)
			origins[p] = name
		}
	}
	settings := v.AllSettings()
	rawSources := settings["sources"]
	delete(settings, "sources")
	errs = append(errs, unknownKeys(settings, reflect.TypeOf(Config{}), "", "sources")...)
	errs = append(errs, decode(settings, &cfg, "")...)

	list, ok := rawSources.([]any)
	if rawSources != nil && !ok {
		errs = append(errs, errors.New("sources: must be a list"))
	}
	for i, raw := range list {
		prefix := fmt.Sprintf("sources[%d]", i)
		m, ok := raw.(map[string]any)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: must be a mapping", prefix))
			continue
		}
		for _, p := range leafPaths(reflect.TypeOf(Source{}), "") {
			name := envName(fmt.Sprintf("sources.%d.%s", i, p))
			if val, ok := env[name]; ok {
				used[name] = true
				setPath(m, strings.Split(p, "."), val)
				origins[prefix+"."+p] = name
			}
		}
		src := DefaultSource()
		errs = append(errs, unknownKeys(m, reflect.TypeOf(Source{}), prefix)...)
		errs = append(errs, decode(m, &src, prefix)...)
		_, typed := m["type"]
		_, own := m[src.Type]
		var blocks []string // blocks of another type than the source's
		for _, other := range SourceTypes() {
			if _, set := m[other]; set && src.Type != other {
				blocks = append(blocks, other)
			}
		}
		switch {
		case len(blocks) == 0:
		case !typed && !own && len(blocks) == 1:
			// The default type, not one the user wrote, and no block of
			// it: say so, and what to write, and check the block as the
			// type it is for, so the default's own requirements
			// (rabbitmq.queue) do not show up as a second, baffling error.
			errs = append(errs, fmt.Errorf("%s.%s: set, but %s.type is not, and it defaults to %q: add type: %s", prefix, blocks[0], prefix, src.Type, blocks[0]))
			src.Type = blocks[0]
		case !typed && !own:
			errs = append(errs, fmt.Errorf("%s: %s blocks set, but %s.type is not, and it defaults to %q: add the type of the one you mean and remove the others", prefix, strings.Join(blocks, " and "), prefix, src.Type))
		default:
			for _, other := range blocks {
				errs = append(errs, fmt.Errorf("%s.%s: set, but the source's type is %q", prefix, other, src.Type))
			}
		}
		if src.Type == "kafka" && src.Kafka.GroupInstanceID == "" {
			// Kubernetes gives the pod's name through the downward API
			// (the chart and inject set POD_NAME): a restarted container
			// comes back as the same static member.
			if pod := env[EnvPodName]; pod != "" {
				src.Kafka.GroupInstanceID = pod
				origins[prefix+".kafka.group_instance_id"] = EnvPodName
			}
		}
		if src.Type == "webhook" {
			// A secret named by env: is read from the same environment,
			// and is a setting of its own, not an unknown variable.
			for _, ref := range src.Webhook.Secrets {
				if name, ok := strings.CutPrefix(ref, "env:"); ok {
					used[name] = true
				}
			}
			_, serrs := src.Webhook.ResolveSecrets(func(name string) (string, bool) { v, ok := env[name]; return v, ok })
			for _, e := range serrs {
				errs = append(errs, fmt.Errorf("%s.webhook.%w", prefix, e))
			}
		}
		cfg.Sources = append(cfg.Sources, src)
	}

	var unknown []string
	for name := range env {
		if strings.HasPrefix(name, EnvPrefix) && !used[name] && !serviceLinkRE.MatchString(name) {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	var settingVars []string
	if len(unknown) > 0 {
		for _, p := range leafPaths(reflect.TypeOf(Config{}), "") {
			settingVars = append(settingVars, envName(p))
		}
		for i := range list {
			for _, p := range leafPaths(reflect.TypeOf(Source{}), "") {
				settingVars = append(settingVars, envName(fmt.Sprintf("sources.%d.%s", i, p)))
			}
		}
	}
	for _, name := range unknown {
		hint := DidYouMean(name, settingVars, func(v string) string { return v })
		errs = append(errs, fmt.Errorf("%s: environment variable matches no setting%s", name, hint))
	}

	// Validate even when decoding failed: a field that did not decode kept
	// its valid default, so every remaining problem is real, and the
	// operator sees all of them in one round.
	if err := cfg.Validate(); err != nil {
		errs = append(errs, unjoin(err)...)
	}
	if len(errs) > 0 {
		return nil, origins, joinLines(withLines(origins.nameVariables(errs), yamlLines(path)))
	}
	return &cfg, origins, nil
}

// serviceLinkRE matches the variables Kubernetes injects for a Service
// (a release named dedupe-proxy gets DEDUPE_PROXY_SERVICE_HOST,
// DEDUPE_PROXY_PORT_9090_TCP, ...). They are not settings, and treating
// them as typos would crash-loop the pod.
var serviceLinkRE = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)?)$`)

// decode maps input onto out (which holds the defaults) one leaf at a
// time: mapstructure stops at the first failing hook within a struct, and
// an operator should see every bad value in one run.
func decode(input map[string]any, out any, prefix string) []error {
	var errs []error
	var walk func(m map[string]any, t reflect.Type, path []string)
	walk = func(m map[string]any, t reflect.Type, path []string) {
		for k, v := range m {
			ft, ok := fieldType(t, k)
			if !ok {
				continue // reported by unknownKeys
			}
			p := append(append([]string(nil), path...), k)
			if sub, isMap := v.(map[string]any); isMap && ft.Kind() == reflect.Struct {
				walk(sub, ft, p)
				continue
			}
			leaf := map[string]any{}
			setAny(leaf, p, v)
			errs = append(errs, decodeOnce(leaf, out, prefix)...)
		}
	}
	walk(input, reflect.TypeOf(out).Elem(), nil)
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

func decodeOnce(input map[string]any, out any, prefix string) []error {
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           out,
		WeaklyTypedInput: true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			byteSizeHook,
			durationHook,
			mapstructure.StringToSliceHookFunc(","),
			strictHook,
		),
	})
	if err != nil {
		return []error{err}
	}
	if err := d.Decode(input); err != nil {
		return flatten(err, prefix)
	}
	return nil
}

func fieldType(t reflect.Type, tag string) (reflect.Type, bool) {
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Tag.Get("mapstructure") == tag {
			return t.Field(i).Type, true
		}
	}
	return nil, false
}

func setAny(m map[string]any, path []string, val any) {
	for _, seg := range path[:len(path)-1] {
		next := map[string]any{}
		m[seg] = next
		m = next
	}
	m[path[len(path)-1]] = val
}

func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	switch from.Kind() {
	case reflect.String:
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		// A bare number would be read as nanoseconds: "ttl: 10" meant ten
		// somethings, never 10ns.
		return nil, fmt.Errorf("%v needs a unit (use 500ms, 30s, 5m, 24h)", data)
	default:
		return data, nil
	}
	d, err := time.ParseDuration(data.(string))
	if err != nil {
		return nil, fmt.Errorf("invalid duration %q (use 500ms, 30s, 5m, 24h)", data)
	}
	return d, nil
}

// flatten turns mapstructure's nested, quoted errors into one
// "path: problem" line each, with unknown keys listed one by one.
func flatten(err error, prefix string) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				walk(c)
			}
			return
		}
		var de *mapstructure.DecodeError
		if errors.As(e, &de) {
			path := joinPath(prefix, de.Name())
			msg := de.Unwrap().Error()
			if keys, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
				for _, k := range strings.Split(keys, ", ") {
					out = append(out, fmt.Errorf("%s: unknown field", joinPath(path, k)))
				}
				return
			}
			var pe *mapstructure.ParseError
			if errors.As(de.Unwrap(), &pe) {
				msg = fmt.Sprintf("cannot read %q as %s", fmt.Sprint(pe.Value), pe.Expected.Type())
			}
			out = append(out, fmt.Errorf("%s: %s", path, msg))
			return
		}
		out = append(out, fmt.Errorf("%s: %w", orRoot(prefix), e))
	}
	walk(err)
	return out
}

func joinPath(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "." + b
}

func orRoot(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}

// unknownKeys reports keys of m that match no field of t, recursively.
func unknownKeys(m map[string]any, t reflect.Type, prefix string, skip ...string) []error {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("mapstructure"); tag != "" && tag != "-" {
			fields[tag] = t.Field(i).Type
		}
	}
	for _, k := range skip {
		fields[k] = nil
	}
	var names, known []string
	for k := range m {
		names = append(names, k)
	}
	for k := range fields {
		known = append(known, k)
	}
	sort.Strings(names)
	var out []error
	for _, k := range names {
		ft, ok := fields[k]
		if !ok {
			hint := DidYouMean(k, known, func(f string) string { return joinPath(prefix, f) })
			out = append(out, fmt.Errorf("%s: unknown field%s", joinPath(prefix, k), hint))
			continue
		}
		if sub, isMap := m[k].(map[string]any); isMap && ft != nil && ft.Kind() == reflect.Struct {
			out = append(out, unknownKeys(sub, ft, joinPath(prefix, k))...)
		}
	}
	return out
}

// leafPaths lists the dotted mapstructure paths of every non-struct field.
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" || tag == "-" {
			continue
		}
		p := joinPath(prefix, tag)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			out = append(out, leafPaths(f.Type, p)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func envName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_").Replace(path))
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func setPath(m map[string]any, path []string, val string) {
	for _, seg := range path[:len(path)-1] {
		next, ok := m[seg].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[seg] = next
		}
		m = next
	}
	m[path[len(path)-1]] = val
}

// lineErrors prints one problem per line, which errors.Join also does, but
// keeps the list inspectable for tests.
type lineErrors []error

func (l lineErrors) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

func (l lineErrors) Unwrap() []error { return l }

func joinLines(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return lineErrors(errs)
}

// ByteSize is a size in bytes that also reads "64KiB", "1MiB", "10MB".
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

// parseByteSize reads a plain byte count or a number with a unit.
func parseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q (use bytes or a unit: 64KiB, 1MiB)", s)
	}
	return ByteSize(n * mult), nil
}

func byteSizeHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(ByteSize(0)) || from.Kind() != reflect.String {
		return data, nil
	}
	return parseByteSize(data.(string))
}
