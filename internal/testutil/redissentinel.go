package testutil

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSentinelOptions shapes a test Sentinel group. Zero values take the
// defaults noted.
type RedisSentinelOptions struct {
	// Replicas is the number of replicas of the master (default 2).
	Replicas int
	// DownAfter is down-after-milliseconds (default 1s): how long the
	// master may be unreachable before the sentinels fail it over.
	DownAfter time.Duration
	// Args are further redis-server arguments for the data nodes.
	Args []string
	// SentinelPassword, when set, is the sentinels' requirepass: clients
	// must AUTH to ask them anything (the sentinels use it among
	// themselves too). The data nodes keep no password.
	SentinelPassword string
}

// RedisSentinel is a master, its replicas and three sentinels, private
// processes on free ports, no persistence. Servers[0] is the initial
// master; after a failover ask Master.
type RedisSentinel struct {
	MasterName string
	Servers    []*RedisNode
	Sentinels  []*RedisNode
	// SentinelPassword is the sentinels' requirepass, empty for none.
	SentinelPassword string
	dir              string
}

// StartRedisSentinel starts a Sentinel group for one test and closes it
// when the test ends.
func StartRedisSentinel(t testing.TB, o RedisSentinelOptions) *RedisSentinel {
	t.Helper()
	s, err := NewRedisSentinel(o)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// NewRedisSentinel starts the master, its replicas and three sentinels
// (quorum 2) and returns once every replica's link is up and every
// sentinel sees every replica and the other sentinels: a few seconds.
func NewRedisSentinel(o RedisSentinelOptions) (*RedisSentinel, error) {
	return onNewPorts(func() (*RedisSentinel, error) { return newRedisSentinelOnce(o) })
}

func newRedisSentinelOnce(o RedisSentinelOptions) (s *RedisSentinel, err error) {
	if o.Replicas == 0 {
		o.Replicas = 2
	}
	if o.DownAfter == 0 {
		o.DownAfter = time.Second
	}
	dir, err := os.MkdirTemp("", "dptest-redis-sentinel-")
	if err != nil {
		return nil, err
	}
	s = &RedisSentinel{MasterName: "dptest-" + strconv.Itoa(os.Getpid()), SentinelPassword: o.SentinelPassword, dir: dir}
	// A failed start returns nil: close what was built, not the result.
	built := s
	defer func() {
		if err != nil {
			built.Close()
		}
	}()
	data := append([]string{"--save", "", "--appendonly", "no"}, o.Args...)
	master, err := newRedisNode(filepath.Join(dir, "server-0"), data...)
	if err != nil {
		return nil, err
	}
	s.Servers = append(s.Servers, master)
	for i := 1; i <= o.Replicas; i++ {
		n, err := newRedisNode(filepath.Join(dir, fmt.Sprintf("server-%d", i)),
			append(append([]string{}, data...), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))...)
		if err != nil {
			return nil, err
		}
		s.Servers = append(s.Servers, n)
	}
	for i := range 3 {
		d := filepath.Join(dir, fmt.Sprintf("sentinel-%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		conf := filepath.Join(d, "sentinel.conf")
		txt := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s 10000\n"+
			"sentinel parallel-syncs %[1]s %[4]d\n",
			s.MasterName, master.Port, o.DownAfter.Milliseconds(), o.Replicas)
		if o.SentinelPassword != "" {
			txt += fmt.Sprintf("requirepass %q\n", o.SentinelPassword)
		}
		// Sentinel rewrites its file as it learns the group.
		if err := os.WriteFile(conf, []byte(txt), 0o644); err != nil {
			return nil, err
		}
		n, err := newRedisNode(d, conf, "--sentinel")
		if err != nil {
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, n)
	}
	if err := master.start(); err != nil {
		return nil, err
	}
	if err := startNodes(s.Servers[1:]); err != nil {
		return nil, err
	}
	if err := startNodes(s.Sentinels); err != nil {
		return nil, err
	}
	if err := s.WaitHealthy(30 * time.Second); err != nil {
		return nil, err
	}
	return s, nil
}

// SentinelAddrs are the sentinels' addresses, what a client is given.
func (s *RedisSentinel) SentinelAddrs() []string {
	var out []string
	for _, n := range s.Sentinels {
		out = append(out, n.Addr())
	}
	return out
}

func (s *RedisSentinel) sentinelClient(sn *RedisNode) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), Password: s.SentinelPassword, DialTimeout: time.Second})
}

// Master is the server the sentinels name as master now.
func (s *RedisSentinel) Master(ctx context.Context) (*RedisNode, error) {
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		c := s.sentinelClient(sn)
		addr, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
		_ = c.Close()
		if err != nil || len(addr) != 2 {
			continue
		}
		for _, n := range s.Servers {
			if n.Addr() == addr[0]+":"+addr[1] {
				return n, nil
			}
		}
	}
	return nil, fmt.Errorf("no sentinel names a master of %s", s.MasterName)
}

// WaitHealthy waits until every sentinel names the same running master,
// that master has every other running server as a linked replica, and
// every sentinel sees those replicas and the other sentinels, e.g. after a
// failover and the restart of the killed master.
func (s *RedisSentinel) WaitHealthy(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return waitFor(ctx, "sentinel group settled", func() bool {
		m, err := s.Master(ctx)
		if err != nil || !m.Running() {
			return false
		}
		running := 0
		for _, n := range s.Servers {
			if n.Running() && n != m {
				running++
			}
		}
		mc := redis.NewClient(&redis.Options{Addr: m.Addr(), DialTimeout: time.Second})
		repl, err := mc.Info(ctx, "replication").Result()
		_ = mc.Close()
		if err != nil || !strings.Contains(repl, "role:master") ||
			strings.Count(repl, "state=online") != running {
			return false
		}
		for _, sn := range s.Sentinels {
			c := s.sentinelClient(sn)
			info, err := c.Master(ctx, s.MasterName).Result()
			_ = c.Close()
			if err != nil || info["ip"]+":"+info["port"] != m.Addr() || info["num-slaves"] != strconv.Itoa(running) ||
				info["num-other-sentinels"] != strconv.Itoa(len(s.Sentinels)-1) || info["flags"] != "master" {
				return false
			}
		}
		return true
	})
}

// Close kills every process and removes their directory.
func (s *RedisSentinel) Close() {
	for _, n := range append(append([]*RedisNode{}, s.Sentinels...), s.Servers...) {
		n.Kill()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
