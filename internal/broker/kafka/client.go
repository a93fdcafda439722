package kafka

import (
	"github.com/twmb/franz-go/pkg/kgo"
)

// Client returns a kgo client with the source's brokers, TLS and SASL
// that consumes nothing, for requests of its own (dedupe-proxy doctor
// asks for topic metadata and the group's state), with extra options
// (hooks). The caller closes it.
func (s *Source) Client(extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append(s.baseOpts(), extra...)...)
}
