package seenset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Fact is something a server may or may not have told us.
type Fact int8

const (
	// FactUnknown: the server refused to say (ACL, renamed command).
	FactUnknown Fact = iota
	FactNo
	FactYes
)

func (f Fact) String() string {
	switch f {
	case FactNo:
		return "no"
	case FactYes:
		return "yes"
	}
	return "unknown"
}

// Gauge is the fact as a metric value: 1 yes, 0 no, -1 unknown.
func (f Fact) Gauge() float64 {
	switch f {
	case FactNo:
		return 0
	case FactYes:
		return 1
	}
	return -1
}

// Durability is what the Redis servers holding the seen-set say about
// keeping its keys: one entry per server, every master of a Cluster.
type Durability struct {
	Servers []ServerDurability
}

// ServerDurability is one server's answer.
type ServerDurability struct {
	// Addr names the server: host:port, or the Sentinel master set.
	Addr string
	// MaxmemoryPolicy and Maxmemory (bytes, 0: no limit) come from INFO
	// memory; InfoErr says why they are unknown.
	MaxmemoryPolicy string
	Maxmemory       int64
	// AOF is INFO persistence's aof_enabled.
	AOF     Fact
	InfoErr error
	// RDB is whether RDB save points are configured. INFO does not say:
	// rdb_last_save_time and rdb_changes_since_last_save exist whether or
	// not saving is configured, and rdb_last_bgsave_* also move for a
	// replica's full sync or a manual BGSAVE. Only CONFIG GET save says,
	// and managed Redis often refuses CONFIG (SaveErr): then RDB is
	// unknown. It is not asked when AOF is on, which settles persistence.
	RDB     Fact
	SaveErr error
}

// Evicting is whether the server may evict the seen-set's keys. Every key
// has a TTL (the lease or the done TTL), so every policy but noeviction
// can pick them; without a maxmemory limit Redis never evicts.
func (s ServerDurability) Evicting() Fact {
	switch {
	case s.InfoErr != nil:
		return FactUnknown
	case s.MaxmemoryPolicy == "noeviction" || s.Maxmemory == 0:
		return FactNo
	}
	return FactYes
}

// Persistent is whether the seen-set survives a restart of the server:
// AOF or RDB snapshots (which lose the writes since the last snapshot).
func (s ServerDurability) Persistent() Fact {
	switch {
	case s.AOF == FactYes || s.RDB == FactYes:
		return FactYes
	case s.AOF == FactNo && s.RDB == FactNo:
		return FactNo
	}
	return FactUnknown
}

// Evicting is yes when any server may evict, else unknown when any
// server would not say.
func (d Durability) Evicting() Fact {
	return worst(d.Servers, ServerDurability.Evicting, FactYes)
}

// Persistent is no when any server is not persistent, else unknown when
// any server would not say: one master without persistence loses its
// share of the keys.
func (d Durability) Persistent() Fact {
	return worst(d.Servers, ServerDurability.Persistent, FactNo)
}

func worst(ss []ServerDurability, f func(ServerDurability) Fact, bad Fact) Fact {
	if len(ss) == 0 {
		return FactUnknown
	}
	out := FactNo // the good answer
	if bad == FactNo {
		out = FactYes
	}
	for _, s := range ss {
		switch f(s) {
		case bad:
			return bad
		case FactUnknown:
			out = FactUnknown
		}
	}
	return out
}

// Warnings are one sentence per problem, for logs and /readyz.
func (d Durability) Warnings() []string {
	var out []string
	for _, s := range d.Servers {
		if s.InfoErr != nil {
			out = append(out, fmt.Sprintf("redis %s refused INFO (%v): cannot tell whether it may evict the seen-set's keys or lose them on restart; allow INFO for this user", s.Addr, s.InfoErr))
		}
		if s.Evicting() == FactYes {
			out = append(out, fmt.Sprintf("redis %s maxmemory-policy is %s (maxmemory %d bytes): the seen-set's keys all have a TTL and may be evicted under memory pressure, and a message whose done key was evicted is forwarded again; set noeviction", s.Addr, s.MaxmemoryPolicy, s.Maxmemory))
		}
		switch {
		case s.Persistent() == FactNo:
			out = append(out, fmt.Sprintf("redis %s has neither AOF nor RDB snapshots: a restart without a replica taking over empties the seen-set, and every message delivered again after it is forwarded again; set appendonly yes", s.Addr))
		case s.Persistent() == FactUnknown && s.InfoErr == nil:
			out = append(out, fmt.Sprintf("redis %s has AOF off and refused CONFIG GET save (%v): cannot tell whether RDB snapshots keep the seen-set across a restart", s.Addr, s.SaveErr))
		}
	}
	return out
}

// Durability asks every server that holds keys (the master; every master
// of a Cluster) how it keeps them. A server that refuses INFO or CONFIG is
// reported as unknown, not as an error: the store still works. The error
// is ErrUnavailable when a server cannot be reached.
func (r *Redis) Durability(ctx context.Context) (Durability, error) {
	var d Durability
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			s, err := serverDurability(ctx, c, c.Options().Addr)
			if err != nil {
				return err
			}
			mu.Lock()
			d.Servers = append(d.Servers, s)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return Durability{}, unavailable(ctx, err)
		}
		return d, nil
	}
	addr := "sentinel master " + r.master
	if r.master == "" {
		addr = "unknown"
		if c, ok := r.c.(*redis.Client); ok {
			addr = c.Options().Addr
		}
	}
	s, err := serverDurability(ctx, r.c, addr)
	if err != nil {
		return Durability{}, unavailable(ctx, err)
	}
	d.Servers = append(d.Servers, s)
	return d, nil
}

func serverDurability(ctx context.Context, c redis.Cmdable, addr string) (ServerDurability, error) {
	s := ServerDurability{Addr: addr}
	mem, err := info(ctx, c, "memory")
	if err == nil {
		var pers map[string]string
		if pers, err = info(ctx, c, "persistence"); err == nil {
			err = s.parse(mem, pers)
		}
	}
	if err != nil {
		if !refused(err) {
			return s, err
		}
		s.InfoErr = err
		return s, nil
	}
	if s.AOF == FactYes {
		return s, nil
	}
	save, err := c.ConfigGet(ctx, "save").Result()
	switch {
	case err != nil && !refused(err):
		return s, err
	case err != nil:
		s.SaveErr = err
	default:
		v, ok := save["save"]
		switch {
		case !ok:
			s.SaveErr = errors.New("no save parameter in the CONFIG GET reply")
		case strings.TrimSpace(v) == "":
			s.RDB = FactNo
		default:
			s.RDB = FactYes
		}
	}
	return s, nil
}

func (s *ServerDurability) parse(mem, pers map[string]string) error {
	s.MaxmemoryPolicy = mem["maxmemory_policy"]
	if s.MaxmemoryPolicy == "" {
		return fmt.Errorf("%w: no maxmemory_policy", errInfoFormat)
	}
	n, err := strconv.ParseInt(mem["maxmemory"], 10, 64)
	if err != nil {
		return fmt.Errorf("%w: maxmemory %q", errInfoFormat, mem["maxmemory"])
	}
	s.Maxmemory = n
	switch pers["aof_enabled"] {
	case "0":
		s.AOF = FactNo
	case "1":
		s.AOF = FactYes
	default:
		return fmt.Errorf("%w: aof_enabled %q", errInfoFormat, pers["aof_enabled"])
	}
	return nil
}

// info reads one INFO section as a map. One section per call: Redis
// before 7 does not take several.
func info(ctx context.Context, c redis.Cmdable, section string) (map[string]string, error) {
	txt, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(txt, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// errInfoFormat: the server answered INFO without a field we need (a
// proxy or a fork that trims it). Reported like a refusal, never guessed.
var errInfoFormat = errors.New("unexpected INFO reply")

// refused is true for an answer from the server (ACL NOPERM, unknown
// command, an INFO reply we cannot read) as opposed to a failure to reach
// it.
func refused(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || errors.Is(err, errInfoFormat)
}
