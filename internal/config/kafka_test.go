package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadKafka(t *testing.T, sources string, env []string) (*Config, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(f, []byte("consumer: c\nsources:\n"+sources), 0o600); err != nil {
		t.Fatal(err)
	}
	return Load(f, env)
}

const kafkaSource = `  - name: %s
    type: kafka
    kafka: {brokers: ["k:9092"], topics: [t], group: g%s}
`

func kafkaSources(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		extra := ""
		if i := strings.IndexByte(n, ','); i >= 0 {
			n, extra = n[:i], ", "+n[i+1:]
		}
		b.WriteString(strings.ReplaceAll(strings.Replace(kafkaSource, "%s", n, 1), "%s", extra))
	}
	return b.String()
}

// group_instance_id: the pod's name in Kubernetes, a dynamic member
// elsewhere, an explicit value wins; the balancers default to
// cooperative-sticky with range beside it.
func TestKafkaGroupInstanceID(t *testing.T) {
	cfg, err := loadKafka(t, kafkaSources("a"), []string{"POD_NAME=orders-7d9f-x2x"})
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Sources[0].Kafka
	if k.GroupInstanceID != "orders-7d9f-x2x" || strings.Join(k.Balancers, ",") != "cooperative-sticky,range" {
		t.Fatalf("group_instance_id %q, balancers %v", k.GroupInstanceID, k.Balancers)
	}
	cfg, err = loadKafka(t, kafkaSources("a"), []string{})
	if err != nil {
		t.Fatal(err)
	}
	if id := cfg.Sources[0].Kafka.GroupInstanceID; id != "" {
		t.Fatalf("group_instance_id %q without POD_NAME, want a dynamic member", id)
	}
	cfg, err = loadKafka(t, kafkaSources("a,group_instance_id: fixed"), []string{"POD_NAME=p"})
	if err != nil {
		t.Fatal(err)
	}
	if id := cfg.Sources[0].Kafka.GroupInstanceID; id != "fixed" {
		t.Fatalf("group_instance_id %q, want the configured one", id)
	}
}

func TestKafkaGroupConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		sources string
		env     []string
		want    string
	}{
		// Two sources of one pod in one group: both would be the pod.
		{kafkaSources("a", "b"), []string{"POD_NAME=p"},
			`sources[1].kafka.group_instance_id (from POD_NAME): "p" is already the instance id of sources[0] in group "g"`},
		{kafkaSources("a,balancers: []"), nil, "sources[0].kafka.balancers: must list at least one"},
		{kafkaSources("a,balancers: [cooperative-sticky, eager]"), nil, `sources[0].kafka.balancers[1]: must be one of`},
	} {
		_, err := loadKafka(t, tc.sources, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sources\n%s: error %v, want %q", tc.sources, err, tc.want)
		}
	}
	// Distinct ids in one group, or the same id in two groups, are fine.
	if _, err := loadKafka(t, kafkaSources("a,group_instance_id: x", "b,group_instance_id: y"), []string{"POD_NAME=p"}); err != nil {
		t.Fatal(err)
	}
}
