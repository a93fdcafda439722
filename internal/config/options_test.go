package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every setting of a source block and of the seen-set's Redis reaches
// the options the proxy, doctor and redrive build their clients from, and
// every option the config could give is given: a field added on one side
// and not mapped fails here. Each leaf field of the block is set to a
// non-zero value; the options must have no zero field but those named as
// not the config's, and zeroing any one config field must change them.
func TestOptionsCarryEverySetting(t *testing.T) {
	for _, c := range []struct {
		name string
		// block is the config struct the mapping reads.
		block any
		// options maps a filled block to the options.
		options func(block reflect.Value) any
		// notFromConfig are option fields the caller sets (the daemon
		// sets OrderKey from the key rules), or tuning
		// the config does not expose.
		notFromConfig []string
		// notOptions are config fields read elsewhere (what to build).
		notOptions []string
	}{
		{
			name:  "rabbitmq",
			block: RabbitMQ{},
			options: func(b reflect.Value) any {
				return Source{Name: "s", RabbitMQ: b.Interface().(RabbitMQ)}.RabbitMQOptions()
			},
			notFromConfig: []string{"Logger", "Metrics"},
		},
		{
			name:    "kafka",
			block:   Kafka{},
			options: func(b reflect.Value) any { return Source{Name: "s", Kafka: b.Interface().(Kafka)}.KafkaOptions() },
			notFromConfig: []string{"ClientID", "NetworkTimeout", "RetryBackoff", "RetryBackoffMax", "FetchMaxWait",
				"DeadLetterTimeout", "Logger", "Metrics", "OrderKey"},
		},
		{
			name:  "redis source",
			block: RedisSource{},
			options: func(b reflect.Value) any {
				return Source{Name: "s", Redis: b.Interface().(RedisSource)}.RedisOptions("consumer")
			},
			notFromConfig: []string{"Replica", "Logger", "Metrics"},
			notOptions:    []string{"Mode"},
		},
		{
			name:    "seen-set redis",
			block:   Redis{},
			options: func(b reflect.Value) any { return b.Interface().(Redis).StoreOptions() },
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			filled := reflect.New(reflect.TypeOf(c.block)).Elem()
			fill(filled)
			opts := reflect.ValueOf(c.options(filled))
			for i := range opts.NumField() {
				f := opts.Type().Field(i)
				if f.IsExported() && opts.Field(i).IsZero() && !slices.Contains(c.notFromConfig, f.Name) {
					t.Errorf("option %s is not set from the config", f.Name)
				}
			}
			for _, path := range leaves(filled, "") {
				if slices.Contains(c.notOptions, path) {
					continue
				}
				one := reflect.New(filled.Type()).Elem()
				one.Set(deepCopy(filled))
				field(one, path).SetZero()
				if reflect.DeepEqual(c.options(one), c.options(filled)) {
					t.Errorf("config field %s does not reach the options", path)
				}
			}
		})
	}
}

// fill sets every leaf of v to a non-zero value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeOf(time.Duration(0)) {
			v.SetInt(int64(time.Second))
		} else {
			v.SetInt(3)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	}
}

// leaves are the dotted paths of v's exported non-struct fields.
func leaves(v reflect.Value, prefix string) []string {
	var out []string
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if v.Field(i).Kind() == reflect.Struct {
			out = append(out, leaves(v.Field(i), prefix+f.Name+".")...)
		} else {
			out = append(out, prefix+f.Name)
		}
	}
	return out
}

func field(v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
	}
	return v
}

// deepCopy copies v's slices too, so zeroing a field of the copy leaves
// v as it was.
func deepCopy(v reflect.Value) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
	case reflect.Slice:
		if !v.IsNil() {
			out.Set(reflect.MakeSlice(v.Type(), v.Len(), v.Len()))
			for i := range v.Len() {
				out.Index(i).Set(deepCopy(v.Index(i)))
			}
		}
	default:
		out.Set(v)
	}
	return out
}
