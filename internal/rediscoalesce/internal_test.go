package rediscoalesce

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A Cluster client reads the layout again after a lost node or a slot
// that moved, never after a short WAIT or a value Redis refused.
func TestMovedOrLost(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errReplicas, false},
		{fmt.Errorf("%w: WAIT 1 100 answered 0", errReplicas), false},
		{redis.Nil, false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{context.DeadlineExceeded, true},
		{proto("MOVED 3999 127.0.0.1:7001"), true},
		{proto("ASK 3999 127.0.0.1:7001"), true},
		{proto("CLUSTERDOWN The cluster is down"), true},
		{proto("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{proto("READONLY You can't write against a read only replica."), true},
		{proto("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{proto("ERR value is not an integer or out of range"), false},
	} {
		if got := movedOrLost(tc.err); got != tc.want {
			t.Errorf("movedOrLost(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// proto is an error as Redis sends it (redis.Error).
type proto string

func (e proto) Error() string { return string(e) }
func (proto) RedisError()     {}

// key is the key a call's master is looked up by: a command's first
// argument after its name, else a script's first key.
func TestCallKey(t *testing.T) {
	for _, tc := range []struct {
		c    *Call
		want string
	}{
		{&Call{Cmd: []any{"SET", "k1", "v"}}, "k1"},
		{&Call{Cmd: []any{"SET", []byte("k1"), "v"}}, ""},
		{&Call{Cmd: []any{"SET", ptr("k4"), "v"}}, "k4"},
		{&Call{Script: redis.NewScript("return 1"), Keys: []string{"k2", "k3"}}, "k2"},
		{&Call{Script: redis.NewScript("return 1")}, ""},
	} {
		if got := tc.c.key(); got != tc.want {
			t.Errorf("key of %v/%v = %q, want %q", tc.c.Cmd, tc.c.Keys, got, tc.want)
		}
	}
}

// leadWithNonNil moves the first call that is neither OftenNil nor a
// merged XACK to the front and keeps the others' order.
func TestLeadWithNonNil(t *testing.T) {
	n1, n2, n3 := &Call{OftenNil: true}, &Call{OftenNil: true}, &Call{OftenNil: true}
	x := &Call{merge: true}
	p1, p2 := &Call{}, &Call{}
	for _, tc := range []struct {
		name     string
		in, want []*Call
	}{
		{"empty", nil, nil},
		{"already led", []*Call{p1, n1, p2}, []*Call{p1, n1, p2}},
		{"all often nil", []*Call{n1, n2, n3}, []*Call{n1, n2, n3}},
		{"one behind", []*Call{n1, n2, p1, n3, p2}, []*Call{p1, n1, n2, n3, p2}},
		{"not a merged xack", []*Call{n1, x, p1}, []*Call{p1, n1, x}},
		{"only a merged xack", []*Call{n1, x}, []*Call{n1, x}},
	} {
		got := append([]*Call(nil), tc.in...)
		leadWithNonNil(got)
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: position %d differs", tc.name, i)
			}
		}
	}
}

func ptr(s string) *string { return &s }
