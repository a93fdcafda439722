package daemon

import (
	"fmt"
	"strings"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// NewRedriver returns the Redriver of the source named name, built from
// the options the proxy consumes it with, and that source's config. The
// error names the source or the config field at fault.
func NewRedriver(cfg *config.Config, name string) (broker.Redriver, config.Source, error) {
	i := -1
	var names []string
	for j, sc := range cfg.Sources {
		names = append(names, sc.Name)
		if sc.Name == name {
			i = j
		}
	}
	if i < 0 {
		return nil, config.Source{}, fmt.Errorf("no source named %q (the config has %s)", name, strings.Join(names, ", "))
	}
	sc := cfg.Sources[i]
	at := fmt.Sprintf("sources[%d]", i)
	k := config.KindOf(sc.Type)
	if k == nil {
		return nil, sc, fmt.Errorf("source %s: unknown source type %q", name, sc.Type)
	}
	r, err := k.NewRedriver(sc, cfg.Consumer, at)
	if err != nil {
		return nil, sc, err
	}
	return r, sc, nil
}
