package testutil

import (
	"net"
	"strconv"
	"testing"
)

func TestRedisServerKillRestart(t *testing.T) {
	s := StartRedis(t)
	addr := s.Addr()
	if err := ping(addr); err != nil {
		t.Fatalf("fresh server: %v", err)
	}
	s.Kill()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("killed server still accepts connections on %s", addr)
	}
	s.Kill() // idempotent
	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("restart moved the server: %s → %s", addr, s.Addr())
	}
	if err := ping(addr); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
	s.Restart() // restarting a running server works too
	if err := ping(addr); err != nil {
		t.Fatalf("twice restarted server: %v", err)
	}
}

func TestFreePort(t *testing.T) {
	p := FreePort(t)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("FreePort gave %d, which cannot be bound: %v", p, err)
	}
	l.Close()
}
