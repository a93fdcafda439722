package config

import "github.com/dedupe-proxy/dedupe-proxy/internal/webhook"

// enums are the values each string setting with a fixed set of values
// takes, by path ("sources" stands for every entry; a list's path for
// each of its items). Validate checks them and Schema lists them, so an
// editor offers exactly what the loader accepts.
var enums = map[string][]string{
	"log.level":                                   {"debug", "info", "warn", "error"},
	"log.format":                                  {"json", "text"},
	"seenset.backend":                             {"redis", "memory"},
	"seenset.on_store_error":                      {"fail_closed", "forward"},
	"sources.type":                                {"rabbitmq", "kafka", "redis", "webhook"},
	"sources.on_missing_key":                      {"forward", "dead_letter"},
	"sources.key_reuse":                           {"warn", "dead_letter", "forward"},
	"sources.rabbitmq.dead_letter.mode":           {"none", "dlx", "publish"},
	"sources.kafka.start_offset":                  {"earliest", "latest"},
	"sources.kafka.isolation_level":               {"read_committed", "read_uncommitted"},
	"sources.kafka.ordering":                      {"partition", "key"},
	"sources.kafka.balancers":                     {"cooperative-sticky", "range", "sticky", "roundrobin"},
	"sources.kafka.sasl.mechanism":                saslMechanisms,
	"sources.redis.mode":                          {"list", "stream"},
	"sources.webhook.profile":                     webhook.Profiles(),
	"sources.webhook.key_from":                    {"profile", "rules"},
	"sources.webhook.mode":                        {"enqueue", "forward"},
	"sources.webhook.target.broker":               {"rabbitmq", "kafka"},
	"sources.webhook.target.kafka.sasl.mechanism": saslMechanisms,
	"sources.webhook.generic.encoding":            {"hex", "base64"},
	"sources.webhook.generic.algorithm":           {"sha256", "sha512", "sha1"},
}

// saslMechanisms: "" is off.
var saslMechanisms = []string{"", "plain", "scram-sha-256", "scram-sha-512"}

// SourceTypes are the kinds of source, in the order help lists them.
func SourceTypes() []string { return enums["sources.type"] }
