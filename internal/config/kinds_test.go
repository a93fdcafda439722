package config

import (
	"reflect"
	"slices"
	"testing"
)

// Every kind has its block in Source, named as the kind, and every block
// of Source is a kind's: the table and the file's shape cannot drift.
// Each row gives what every switch on the type used to choose.
func TestEveryKindHasItsBlockAndRow(t *testing.T) {
	blocks := map[string]bool{}
	st := reflect.TypeOf(Source{})
	for i := range st.NumField() {
		f := st.Field(i)
		if f.Type.Kind() == reflect.Struct {
			blocks[f.Tag.Get("mapstructure")] = true
		}
	}
	for _, k := range Kinds {
		if !blocks[k.Name] {
			t.Errorf("kind %s has no block %s in Source", k.Name, k.Name)
		}
		delete(blocks, k.Name)
		if k.Validate == nil || k.NewRedriver == nil || k.Check == nil || k.Init == "" {
			t.Errorf("kind %s: its row lacks Validate, NewRedriver, Check or Init", k.Name)
		}
		if k.NewSource == nil && k.Name != "webhook" {
			t.Errorf("kind %s: no NewSource", k.Name)
		}
		if k.Target != nil && (k.Target.Validate == nil || k.Target.NewSink == nil || k.Target.Check == nil) {
			t.Errorf("kind %s: its Target lacks Validate, NewSink or Check", k.Name)
		}
	}
	for b := range blocks {
		t.Errorf("Source's block %s is no kind's", b)
	}
	if !slices.Equal(SourceTypes(), []string{"rabbitmq", "kafka", "redis", "webhook"}) {
		t.Errorf("SourceTypes() = %v: help, init and the schema list them in this order", SourceTypes())
	}
	if !slices.Equal(TargetBrokers(), []string{"rabbitmq", "kafka"}) {
		t.Errorf("TargetBrokers() = %v", TargetBrokers())
	}
}

// A block carries what only the rest of the config knows into the
// options a source is built from: its name, and for a Redis stream the
// consumer as its group.
func TestBlocksTakeTheSourceName(t *testing.T) {
	s := DefaultSource()
	s.Name = "orders"
	if got := s.rabbitMQ().Name; got != "orders" {
		t.Errorf("rabbitmq name = %q", got)
	}
	if got := s.kafka().Name; got != "orders" {
		t.Errorf("kafka name = %q", got)
	}
	if o := s.redis("billing"); o.Name != "orders" || o.Group != "billing" {
		t.Errorf("redis name, group = %q, %q", o.Name, o.Group)
	}
}
