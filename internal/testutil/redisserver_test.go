package testutil

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
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

// Extra arguments override the defaults.
func TestStartRedisWith(t *testing.T) {
	s := StartRedisWith(t, "--maxmemory-policy", "volatile-lru", "--appendonly", "yes")
	for param, want := range map[string]string{"maxmemory-policy": "volatile-lru", "appendonly": "yes"} {
		if got := configGet(t, s.Addr(), param); got != want {
			t.Errorf("%s = %q, want %q", param, got, want)
		}
	}
}

// configGet speaks RESP, like ping, so testutil still needs no client.
func configGet(t *testing.T, addr, param string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(param), param)
	r := bufio.NewReader(c)
	// *2 $len name $len value
	var lines []string
	for range 5 {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSpace(l))
	}
	return lines[4]
}

// Written lists what a persistent server applied, a script's writes
// included, across a kill and restart; a server without persistence
// says it keeps no file.
func TestRedisServerWritten(t *testing.T) {
	s := StartRedisPersistent(t)
	send := func(args ...string) {
		t.Helper()
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	body := "line one\r\nline two" // CRLF inside a value must not split it
	send("RPUSH", "l", body, "other")
	send("EVAL", "return redis.call('LREM', KEYS[1], -1, ARGV[1])", "1", "l", body)
	s.Kill()
	s.Restart()
	send("DEL", "l")
	got, err := s.Written()
	if err != nil {
		t.Fatal(err)
	}
	var lrem, del bool
	for _, cmd := range got {
		lrem = lrem || (len(cmd) == 4 && strings.EqualFold(cmd[0], "LREM") && cmd[3] == body)
		del = del || (len(cmd) == 2 && strings.EqualFold(cmd[0], "DEL") && cmd[1] == "l")
	}
	if !lrem || !del {
		t.Fatalf("Written = %q: want the script's LREM of %q and the DEL after the restart", got, body)
	}
	if _, err := StartRedis(t).Written(); err == nil || !strings.Contains(err.Error(), "StartRedisPersistent") {
		t.Fatalf("Written on a server without persistence: %v", err)
	}
}
