package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// seenSet checks the Redis the seen-set lives in: reachable, its version
// (SET … NX GET needs 7.0), and — with the seen-set's own durability
// check — whether it may evict keys or lose them on a restart.
func (c *checker) seenSet(cfg *config.Config) {
	s := cfg.SeenSet
	if s.Backend == "memory" {
		c.Add(Warn, "seen-set", "backend memory: each replica remembers only its own keys, and forgets them on restart; use redis with more than one replica")
		return
	}
	r := s.Redis
	check := "redis " + strings.Join(r.Addrs, ",")
	if r.MasterName != "" {
		check = "redis sentinel master " + r.MasterName + " via " + strings.Join(r.Addrs, ",")
	}
	// The seen-set's own client, as the proxy builds it: its errors name
	// the setting to fix (the sentinels refusing the credentials, for one).
	sr, err := seenset.NewRedis(c.storeOptions(r))
	if err != nil {
		c.Add(Fail, check, "%v", err)
		return
	}
	defer sr.Close()
	cl := sr.Client()
	ctx, cancel := c.Context()
	defer cancel()
	if err := sr.Ping(ctx); err != nil {
		c.Add(Fail, check, "not reachable: %v", err)
		return
	}
	c.Add(OK, check, "reachable")
	c.redisVersion(check, cl)
	c.topology(check, r)

	d, err := sr.Durability(ctx)
	if err != nil {
		c.Add(Fail, check, "cannot read its durability: %v", err)
		return
	}
	for _, sv := range d.Servers {
		at := "redis " + sv.Addr
		switch sv.Evicting() {
		case seenset.FactNo:
			limit := fmt.Sprintf("maxmemory %d bytes", sv.Maxmemory)
			if sv.Maxmemory == 0 {
				limit = "no maxmemory limit"
			}
			c.Add(OK, at, "maxmemory-policy %s (%s): seen-set keys are never evicted", sv.MaxmemoryPolicy, limit)
		case seenset.FactYes:
			c.Add(Warn, at, "maxmemory-policy %s (maxmemory %d bytes): seen-set keys may be evicted under memory pressure, and a message whose done key was evicted is forwarded again; set noeviction", sv.MaxmemoryPolicy, sv.Maxmemory)
		default:
			c.Add(Warn, at, "refused INFO (%v): cannot tell whether it may evict the seen-set's keys", sv.InfoErr)
		}
		switch sv.Persistent() {
		case seenset.FactYes:
			c.Add(OK, at, "persistence: %s", persistence(sv))
		case seenset.FactNo:
			c.Add(Warn, at, "persistence: neither AOF nor RDB snapshots: a restart empties the seen-set and redelivered messages are forwarded again; set appendonly yes")
		default:
			c.Add(Warn, at, "persistence unknown: %s", unknownPersistence(sv))
		}
	}
}

// storeOptions are the seen-set's own options, bounded by doctor's
// timeout, with a pool of two: doctor asks one thing at a time.
func (c *checker) storeOptions(r config.Redis) seenset.RedisOptions {
	o := r
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = min(o.DialTimeout, c.Timeout), min(o.ReadTimeout, c.Timeout), min(o.WriteTimeout, c.Timeout)
	o.PoolSize = 2
	return o
}

// topology reports the deployment the servers describe (standalone,
// Sentinel or Cluster; masters and their replicas) with the seen-set's own
// Describe, so doctor and the proxy's start-up line agree; its warnings
// (a master without a replica, a wait_replicas no master can meet, one
// address of a Cluster) are doctor warnings.
func (c *checker) topology(check string, r config.Redis) {
	o := c.storeOptions(r)
	ctx, cancel := c.Context()
	defer cancel()
	t, err := seenset.DescribeRedis(ctx, o)
	if err != nil {
		c.Add(Warn, check, "deployment unknown: %v", err)
		return
	}
	c.Add(OK, check, "deployment: %s", t)
	for _, w := range t.Warnings {
		c.Add(Warn, check, "%s", w)
	}
}

func (c *checker) redisVersion(check string, cl redis.UniversalClient) {
	ctx, cancel := c.Context()
	defer cancel()
	txt, err := cl.Info(ctx, "server").Result()
	if err != nil {
		c.Add(Warn, check, "version unknown: INFO server refused (%v)", err)
		return
	}
	var v string
	for _, line := range strings.Split(txt, "\n") {
		if val, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			v = val
		}
	}
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	switch {
	case v == "":
		c.Add(Warn, check, "version unknown: no redis_version in INFO server")
	case major < 7:
		c.Add(Warn, check, "version %s: before 7.0 SET … NX GET is refused, and every claim and commit runs as a Lua script (slower)", v)
	default:
		c.Add(OK, check, "version %s", v)
	}
}

func persistence(s seenset.ServerDurability) string {
	var p []string
	if s.AOF == seenset.FactYes {
		p = append(p, "AOF on")
	}
	if s.RDB == seenset.FactYes {
		p = append(p, "RDB snapshots (writes since the last one are lost in a crash)")
	}
	return strings.Join(p, ", ")
}

func unknownPersistence(s seenset.ServerDurability) string {
	if s.InfoErr != nil {
		return fmt.Sprintf("INFO refused (%v)", s.InfoErr)
	}
	return fmt.Sprintf("AOF off and CONFIG GET save refused (%v): cannot tell whether RDB snapshots keep the seen-set across a restart", s.SaveErr)
}
