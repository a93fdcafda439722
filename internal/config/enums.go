package config

import (
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// enums are the values each string setting with a fixed set of values
// takes, by path ("sources" stands for every entry; a list's path for
// each of its items). Validate checks them and Schema lists them, so an
// editor offers exactly what the loader accepts.
var enums = map[string][]string{
	"log.level":                                   {"debug", "info", "warn", "error"},
	"log.format":                                  {"json", "text"},
	"seenset.backend":                             {"redis", "memory"},
	"seenset.on_store_error":                      {"fail_closed", "forward"},
	"sources.on_missing_key":                      {"forward", "dead_letter"},
	"sources.key_reuse":                           {"warn", "dead_letter", "forward"},
	"sources.webhook.profile":                     webhook.Profiles(),
	"sources.webhook.key_from":                    {"profile", "rules"},
	"sources.webhook.mode":                        {"enqueue", "forward"},
	"sources.webhook.target.kafka.sasl.mechanism": kafka.SASLMechanisms,
	"sources.webhook.generic.encoding":            {"hex", "base64"},
	"sources.webhook.generic.algorithm":           {"sha256", "sha512", "sha1"},
}

func init() {
	// Each kind's own enums, under its block; and the kinds themselves.
	enums["sources.type"] = SourceTypes()
	enums["sources.webhook.target.broker"] = TargetBrokers()
	for _, k := range Kinds {
		for path, vals := range k.Enums {
			enums["sources."+k.Name+"."+path] = vals
		}
	}
}
