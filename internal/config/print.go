package config

import (
	"fmt"
	"io"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// Redacted stands for a secret in printed configuration.
const Redacted = "<redacted>"

// secretPaths are the settings printed as Redacted; a source's paths
// start with "sources[].".
var secretPaths = map[string]bool{
	"admin.token":                     true,
	"seenset.redis.password":          true,
	"seenset.redis.sentinel_password": true,
	"sources[].kafka.sasl.password":   true,
	"sources[].redis.password":        true,

	"sources[].webhook.target.kafka.sasl.password": true,
}

// urlPaths hold URLs whose password is redacted.
var urlPaths = map[string]bool{
	"app.url":                               true,
	"app.health_url":                        true,
	"sources[].rabbitmq.url":                true,
	"sources[].redis.url":                   true,
	"sources[].webhook.target.rabbitmq.url": true,
}

// Print writes the effective configuration as YAML, each setting followed
// by where it came from (o: default, file, or the environment variable),
// with passwords and tokens redacted. A source shows only the block of
// its type.
func (c *Config) Print(w io.Writer, o Origins) error {
	doc := &yaml.Node{Kind: yaml.MappingNode}
	printStruct(doc, reflect.ValueOf(*c), "", "", o)
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for i, s := range c.Sources {
		m := &yaml.Node{Kind: yaml.MappingNode}
		printStruct(m, reflect.ValueOf(s), fmt.Sprintf("sources[%d]", i), "sources[]", o)
		seq.Content = append(seq.Content, m)
	}
	doc.Content = append(doc.Content, scalar("sources"), seq)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

func printStruct(out *yaml.Node, v reflect.Value, path, generic string, o Origins) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("mapstructure")
		if tag == "" || tag == "-" {
			continue
		}
		if unusedBlock(v, generic, tag) {
			continue
		}
		p, g := joinPath(path, tag), joinPath(generic, tag)
		f := v.Field(i)
		if f.Kind() == reflect.Struct && f.Type() != reflect.TypeOf(time.Duration(0)) {
			m := &yaml.Node{Kind: yaml.MappingNode}
			printStruct(m, f, p, g, o)
			out.Content = append(out.Content, scalar(tag), m)
			continue
		}
		val := printValue(f, g)
		val.LineComment = o.Of(p)
		if g == "sources[].key" {
			if w := v.FieldByName("Webhook").Interface().(Webhook); v.FieldByName("Type").String() == "webhook" && w.KeyFrom != "rules" {
				if rule := webhook.ProfileKeyRule(w.Profile); rule != "" {
					val.LineComment += "; not used: profile " + w.Profile + " keys by " + rule + " (key_from: profile)"
				}
			}
		}
		out.Content = append(out.Content, scalar(tag), val)
	}
}

// unusedBlock: a block of v that its settings leave unused, so printing
// it would only suggest it matters: a source's block of a kind other than
// its type; a webhook's target in mode forward, and the target's block
// other than its broker's; the generic block for any profile but
// generic-hmac.
func unusedBlock(v reflect.Value, generic, tag string) bool {
	switch generic {
	case "sources[]":
		return KindOf(tag) != nil && tag != v.FieldByName("Type").String()
	case "sources[].webhook":
		switch tag {
		case "target":
			return v.FieldByName("Mode").String() == "forward"
		case "generic":
			return v.FieldByName("Profile").String() != webhook.ProfileGenericHMAC
		}
	case "sources[].webhook.target":
		return KindOf(tag) != nil && tag != v.FieldByName("Broker").String()
	}
	return false
}

func printValue(f reflect.Value, generic string) *yaml.Node {
	switch f.Kind() {
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for i := 0; i < f.Len(); i++ {
			s := f.Index(i).String()
			if generic == "sources[].webhook.secrets" && !strings.HasPrefix(s, "env:") && !strings.HasPrefix(s, "file:") {
				s = Redacted // not a reference: perhaps the secret itself, pasted in
			}
			n.Content = append(n.Content, quoted(s))
		}
		return n
	case reflect.String:
		s := f.String()
		switch {
		case s != "" && secretPaths[generic]:
			s = Redacted
		case s != "" && urlPaths[generic]:
			s = redactURL(s)
		}
		return quoted(s)
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(f.Bool())}
	case reflect.Float32, reflect.Float64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(f.Float(), 'g', -1, 64)}
	case reflect.Int64:
		if f.Type() == reflect.TypeOf(time.Duration(0)) {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: time.Duration(f.Int()).String()}
		}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(f.Interface())}
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }

func quoted(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// RedactedURLPassword stands for a URL's password in printed
// configuration: the placeholder of url.URL.Redacted, which the logs use
// too. Unlike Redacted it is valid in a URL's userinfo, so the printed
// configuration still validates as it is.
const RedactedURLPassword = "xxxxx"

// redactURL replaces a URL's password with RedactedURLPassword; a URL
// that does not parse is replaced whole, as it may hold one.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return Redacted
	}
	if _, has := u.User.Password(); has {
		return u.Redacted()
	}
	return raw
}
