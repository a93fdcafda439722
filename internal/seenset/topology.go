package seenset

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// RedisMode is how the seen-set's Redis is deployed.
type RedisMode string

const (
	ModeStandalone RedisMode = "standalone"
	ModeSentinel   RedisMode = "sentinel"
	ModeCluster    RedisMode = "cluster"
)

// Topology is what the servers holding the seen-set say about their
// deployment: the mode the client runs in, and every master with the
// number of replicas connected to it.
type Topology struct {
	Mode    RedisMode
	Masters []MasterInfo
	// Warnings are configuration mistakes the servers reveal: one address
	// of a Cluster node (keys of other nodes' slots fail), a replica given
	// as the address (writes fail), a replica wait no master can satisfy.
	Warnings []string
}

// MasterInfo is one master: its address (the Sentinel master set for
// Sentinel) and its connected replicas (INFO replication), -1 when the
// server refused to say.
type MasterInfo struct {
	Addr     string
	Replicas int
}

// String is the one-line summary for logs and /readyz, e.g.
// "cluster, 3 masters, 1 replica each".
func (t Topology) String() string {
	if len(t.Masters) == 0 {
		return string(t.Mode)
	}
	s := fmt.Sprintf("%s, %d master", t.Mode, len(t.Masters))
	if len(t.Masters) != 1 {
		s += "s"
	}
	lo, hi := t.Masters[0].Replicas, t.Masters[0].Replicas
	for _, m := range t.Masters {
		lo, hi = min(lo, m.Replicas), max(hi, m.Replicas)
	}
	if lo < 0 {
		return s + ", replicas unknown"
	}
	plural := func(n int) string {
		if n == 1 {
			return "replica"
		}
		return "replicas"
	}
	switch {
	case lo != hi:
		s += fmt.Sprintf(", %d to %d replicas each", lo, hi)
	case len(t.Masters) == 1:
		s += fmt.Sprintf(", %d %s", lo, plural(lo))
	default:
		s += fmt.Sprintf(", %d %s each", lo, plural(lo))
	}
	return s
}

// DescribeRedis connects with o, describes the deployment and closes the
// connection: for a diagnostic command that has no store running.
func DescribeRedis(ctx context.Context, o RedisOptions) (Topology, error) {
	r, err := NewRedis(o)
	if err != nil {
		return Topology{}, err
	}
	defer r.Close()
	return r.Describe(ctx)
}

// Describe asks the servers how they are deployed. It returns
// ErrUnavailable when they cannot be reached; a server that refuses INFO
// is listed with what is known and a warning.
func (r *Redis) Describe(ctx context.Context) (Topology, error) {
	var t Topology
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		t.Mode = ModeCluster
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			m, warn, err := describeServer(ctx, c, c.Options().Addr)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			t.Masters = append(t.Masters, m)
			if warn != "" {
				t.Warnings = append(t.Warnings, warn)
			}
			return nil
		})
		if err != nil {
			return Topology{}, unavailable(ctx, err)
		}
		sort.Slice(t.Masters, func(i, j int) bool { return t.Masters[i].Addr < t.Masters[j].Addr })
		sort.Strings(t.Warnings)
	} else {
		addr := "unknown"
		t.Mode = ModeStandalone
		switch {
		case r.master != "":
			t.Mode, addr = ModeSentinel, "sentinel master "+r.master
		case len(r.addrs) == 1:
			addr = r.addrs[0]
		}
		m, warn, err := describeServer(ctx, r.c, addr)
		if err != nil {
			return Topology{}, unavailable(ctx, err)
		}
		t.Masters = []MasterInfo{m}
		if warn != "" {
			t.Warnings = append(t.Warnings, warn)
		}
		if t.Mode == ModeStandalone {
			if w := clusterNodeAlone(ctx, r.c, addr); w != "" {
				t.Warnings = append(t.Warnings, w)
			}
		}
	}
	if t.Mode != ModeStandalone {
		for _, m := range t.Masters {
			if m.Replicas == 0 {
				t.Warnings = append(t.Warnings, fmt.Sprintf("redis %s has no connected replica: if it fails, no replica can take over and its share of the seen-set is lost", m.Addr))
			}
		}
	}
	if n := r.batch.WaitReplicas(); n > 0 {
		for _, m := range t.Masters {
			if m.Replicas >= 0 && m.Replicas < n {
				t.Warnings = append(t.Warnings, fmt.Sprintf("redis %s has %d connected replicas but seenset.redis.wait_replicas is %d: every claim and commit on it fails until enough replicas are connected", m.Addr, m.Replicas, n))
			}
		}
	}
	return t, nil
}

// describeServer reads INFO replication: the server must be a master,
// and its connected_slaves are its replicas.
func describeServer(ctx context.Context, c redis.Cmdable, addr string) (MasterInfo, string, error) {
	m := MasterInfo{Addr: addr, Replicas: -1}
	repl, err := info(ctx, c, "replication")
	if err != nil {
		if refused(err) {
			// The durability check already says INFO was refused.
			return m, "", nil
		}
		return m, "", err
	}
	if role := repl["role"]; role != "master" {
		return m, fmt.Sprintf("redis %s is a %s, not a master: the seen-set's writes fail there; give the master's address", addr, role), nil
	}
	if n, err := strconv.Atoi(repl["connected_slaves"]); err == nil {
		m.Replicas = n
	}
	return m, "", nil
}

// clusterNodeAlone warns when one address names a node of a Cluster: the
// client then runs standalone and every key of another node's slots is
// refused (MOVED).
func clusterNodeAlone(ctx context.Context, c redis.Cmdable, addr string) string {
	cl, err := info(ctx, c, "cluster")
	if err != nil || strings.TrimSpace(cl["cluster_enabled"]) != "1" {
		return ""
	}
	return fmt.Sprintf("redis %s is a Cluster node but seenset.redis.addrs lists one address, so the proxy talks to it alone and keys of other nodes fail; list at least two nodes of the cluster", addr)
}
