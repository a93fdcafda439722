package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClusterOptions shapes a test Redis Cluster. Zero values take the
// defaults noted.
type RedisClusterOptions struct {
	// Masters is the number of masters (default 3); each gets one replica.
	Masters int
	// NodeTimeout is cluster-node-timeout (default 1s): how long a master
	// may be unreachable before its replica takes over.
	NodeTimeout time.Duration
	// Args are further redis-server arguments for every node.
	Args []string
}

// RedisCluster is a Redis Cluster of private redis-server processes on
// free ports (never the shared 6379), one replica per master, no
// persistence. Masters[i] and Replicas[i] are the initial pairs; after a
// failover ask MasterOf who holds a key.
type RedisCluster struct {
	Masters  []*RedisNode
	Replicas []*RedisNode
	dir      string
}

// StartRedisCluster starts a cluster for one test and closes it when the
// test ends. Tests that share one cluster across a package use
// NewRedisCluster and close it themselves (TestMain).
func StartRedisCluster(t testing.TB, o RedisClusterOptions) *RedisCluster {
	t.Helper()
	c, err := NewRedisCluster(o)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// NewRedisCluster starts the nodes, assigns the slots evenly to the
// masters, joins the nodes, attaches each replica and returns once every
// node reports cluster_state:ok and every replica's link is up: a few
// seconds. Close kills the nodes and removes their directory.
func NewRedisCluster(o RedisClusterOptions) (*RedisCluster, error) {
	return onNewPorts(func() (*RedisCluster, error) { return newRedisClusterOnce(o) })
}

// onNewPorts runs start up to three times: a free port can be taken by
// another test before the server binds it, and new ports then do.
func onNewPorts[T any](start func() (T, error)) (T, error) {
	var errs []error
	for range 3 {
		x, err := start()
		if err == nil {
			return x, nil
		}
		errs = append(errs, err)
	}
	var zero T
	return zero, errors.Join(errs...)
}

func newRedisClusterOnce(o RedisClusterOptions) (c *RedisCluster, err error) {
	if o.Masters == 0 {
		o.Masters = 3
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = time.Second
	}
	dir, err := os.MkdirTemp("", "dptest-redis-cluster-")
	if err != nil {
		return nil, err
	}
	c = &RedisCluster{dir: dir}
	// A failed start returns nil: close what was built, not the result.
	built := c
	defer func() {
		if err != nil {
			built.Close()
		}
	}()
	for i := range 2 * o.Masters {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus),
			// A replica that was cut off for a while may still take over:
			// the failover tests pause replicas on purpose.
			"--cluster-replica-validity-factor", "0",
			"--save", "", "--appendonly", "no",
		}
		n, err := newRedisNode(filepath.Join(dir, fmt.Sprintf("node-%d", i)), append(args, o.Args...)...)
		if err != nil {
			return nil, err
		}
		if i < o.Masters {
			c.Masters = append(c.Masters, n)
		} else {
			c.Replicas = append(c.Replicas, n)
		}
	}
	if err := startNodes(c.Nodes()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.form(ctx); err != nil {
		return nil, fmt.Errorf("forming the redis cluster: %w", err)
	}
	return c, nil
}

func (c *RedisCluster) form(ctx context.Context) error {
	clients := map[*RedisNode]*redis.Client{}
	for _, n := range c.Nodes() {
		clients[n] = redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second})
	}
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	per := 16384 / len(c.Masters)
	ids := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		lo, hi := i*per, (i+1)*per-1
		if i == len(c.Masters)-1 {
			hi = 16383
		}
		cl := clients[m]
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return err
		}
		// Distinct epochs from the start, as redis-cli --cluster create
		// sets them, instead of waiting for the collision resolution.
		if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return err
		}
		id, err := cl.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return err
		}
		ids[i] = id
	}
	first := clients[c.Masters[0]]
	for _, n := range c.Nodes()[1:] {
		bus := busPort(n)
		if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port, bus).Err(); err != nil {
			return err
		}
	}
	all := len(c.Nodes())
	if err := waitFor(ctx, "every node to know every other", func() bool {
		for _, cl := range clients {
			txt, err := cl.ClusterNodes(ctx).Result()
			if err != nil || strings.Count(strings.TrimSpace(txt), "\n")+1 != all {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	for i, r := range c.Replicas {
		if err := clients[r].Do(ctx, "CLUSTER", "REPLICATE", ids[i]).Err(); err != nil {
			return err
		}
	}
	return c.waitHealthy(ctx, clients)
}

// WaitHealthy waits until every running node reports cluster_state:ok,
// every master has a replica whose link is up, and every node agrees on
// the masters, e.g. after a failover and the restart of the killed node.
func (c *RedisCluster) WaitHealthy(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	clients := map[*RedisNode]*redis.Client{}
	for _, n := range c.Nodes() {
		if n.Running() {
			clients[n] = redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second})
		}
	}
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	return c.waitHealthy(ctx, clients)
}

func (c *RedisCluster) waitHealthy(ctx context.Context, clients map[*RedisNode]*redis.Client) error {
	return waitFor(ctx, "cluster_state:ok on every node and every replica linked", func() bool {
		masters, linked := 0, 0
		for _, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			repl, err := cl.Info(ctx, "replication").Result()
			if err != nil {
				return false
			}
			switch {
			case strings.Contains(repl, "role:master"):
				masters++
			case strings.Contains(repl, "master_link_status:up"):
				linked++
			}
		}
		return masters == len(c.Masters) && linked == len(clients)-masters
	})
}

// Nodes are every node, masters first.
func (c *RedisCluster) Nodes() []*RedisNode {
	return append(append([]*RedisNode{}, c.Masters...), c.Replicas...)
}

// Addrs are every node's address, the seeds a client is given.
func (c *RedisCluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes() {
		out = append(out, n.Addr())
	}
	return out
}

// MasterOf is the node that holds key's slot now, as a running node sees
// it.
func (c *RedisCluster) MasterOf(ctx context.Context, key string) (*RedisNode, error) {
	slot := redisClusterSlot(key)
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second})
		// CLUSTER SLOTS, deprecated for CLUSTER SHARDS, names a slot's
		// master first as this node sees it, which is what the failover
		// tests ask; SHARDS' role and health would need their own reading
		// in the middle of a failover.
		slots, err := cl.ClusterSlots(ctx).Result() //nolint:staticcheck // see above
		_ = cl.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if int64(slot) >= int64(s.Start) && int64(slot) <= int64(s.End) && len(s.Nodes) > 0 {
				return c.node(s.Nodes[0].Addr), nil
			}
		}
	}
	return nil, fmt.Errorf("no running node knows the master of slot %d", slot)
}

// ReplicaOf is a running replica of master, as master reports it.
func (c *RedisCluster) ReplicaOf(ctx context.Context, master *RedisNode) (*RedisNode, error) {
	cl := redis.NewClient(&redis.Options{Addr: master.Addr(), DialTimeout: time.Second})
	defer cl.Close()
	txt, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(txt, "\n") {
		// slave0:ip=127.0.0.1,port=6380,state=online,offset=...,lag=0
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, "port=") {
			continue
		}
		_, rest, _ := strings.Cut(line, "port=")
		port, _, _ := strings.Cut(rest, ",")
		if n := c.node("127.0.0.1:" + port); n != nil {
			return n, nil
		}
	}
	return nil, errors.New("master has no replica")
}

func (c *RedisCluster) node(addr string) *RedisNode {
	for _, n := range c.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Close kills every node and removes their directory.
func (c *RedisCluster) Close() {
	for _, n := range c.Nodes() {
		n.Kill()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

func busPort(n *RedisNode) string {
	for i, a := range n.args {
		if a == "--cluster-port" && i+1 < len(n.args) {
			return n.args[i+1]
		}
	}
	return strconv.Itoa(n.Port + 10000)
}

func waitFor(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// redisClusterSlot is Redis Cluster's key slot: CRC16 of the key, or of
// its {hash tag}, modulo 16384.
func redisClusterSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
