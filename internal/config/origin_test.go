package config

import (
	"strings"
	"testing"
)

// Each setting says whether it is a default, from the file or from a
// variable (which outranks the file).
func TestOrigins(t *testing.T) {
	_, o, err := LoadWithOrigins("testdata/valid-minimal.yaml", []string{
		"DEDUPE_PROXY_APP_TIMEOUT=3s",
		"DEDUPE_PROXY_SOURCES_0_RABBITMQ_QUEUE=other",
		"DEDUPE_PROXY_SEENSET_REDIS_ADDRS=10.0.0.1:6379,10.0.0.2:6379",
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"consumer":                  "file",
		"app.url":                   "default",
		"app.timeout":               "env DEDUPE_PROXY_APP_TIMEOUT",
		"seenset.redis.addrs":       "env DEDUPE_PROXY_SEENSET_REDIS_ADDRS",
		"sources[0].name":           "file",
		"sources[0].rabbitmq.queue": "env DEDUPE_PROXY_SOURCES_0_RABBITMQ_QUEUE",
		"sources[0].rabbitmq.url":   "default",
	} {
		if got := o.Of(path); got != want {
			t.Errorf("%s: origin %q, want %q", path, got, want)
		}
	}
}

// An invalid value set by a variable is reported with the variable's
// name, whether decoding or validation rejected it, for a top-level
// setting, a source's, and an item of a list.
func TestErrorsNameTheVariable(t *testing.T) {
	_, err := Load("testdata/valid-minimal.yaml", []string{
		"DEDUPE_PROXY_APP_URL=localhost:8080",
		"DEDUPE_PROXY_SEENSET_REDIS_ADDRS=10.0.0.1:6379,nohost",
		"DEDUPE_PROXY_SOURCES_0_RABBITMQ_PREFETCH=0",
		"DEDUPE_PROXY_SEENSET_REDIS_TLS=1.5",
		"DEDUPE_PROXY_DELIVERY_MAX_ATTEMPTS=2.5",
	})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"app.url (from DEDUPE_PROXY_APP_URL): has no scheme: write http://localhost:8080 (or https://)",
		"seenset.redis.addrs[1] (from DEDUPE_PROXY_SEENSET_REDIS_ADDRS): must be host:port, got \"nohost\"",
		"sources[0].rabbitmq.prefetch (from DEDUPE_PROXY_SOURCES_0_RABBITMQ_PREFETCH): must be at least 1, got 0",
		"seenset.redis.tls (from DEDUPE_PROXY_SEENSET_REDIS_TLS): cannot read \"1.5\" as bool",
		"delivery.max_attempts (from DEDUPE_PROXY_DELIVERY_MAX_ATTEMPTS): cannot read \"2.5\" as int",
	} {
		if !strings.Contains(err.Error()+"\n", want+"\n") {
			t.Errorf("missing line %q in:\n%v", want, err)
		}
	}
	// A problem in the file is not blamed on a variable.
	_, err = Load("testdata/invalid-loose-types.yaml", []string{"DEDUPE_PROXY_APP_TIMEOUT=3s"})
	if err == nil || strings.Contains(err.Error(), "(from ") {
		t.Fatalf("file errors blamed on a variable: %v", err)
	}
}
