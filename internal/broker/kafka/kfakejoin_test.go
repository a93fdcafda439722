package kafka_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Apache Kafka's classic group coordinator counts a member that waits in
// JoinGroup as alive (MemberMetadata.hasSatisfiedHeartbeat: members
// awaiting a rebalance satisfy their heartbeats), and when it does remove
// a member it answers the parked join with UNKNOWN_MEMBER_ID. kfake
// keeps the member's session timer running while its join is parked,
// removes it when the timer fires, and never answers the join: the
// client learns nothing until its own request deadline (rebalance
// timeout plus the request overhead).
//
// This is why, after a burst of crashes with dynamic members, a surviving
// replica can wait far longer than session_timeout for its assignment on
// kfake (the chaos suite's crash-burst resume). The test pins that
// divergence down, so a kfake upgrade that fixes it fails here and the
// bound can then be asserted against kfake as well.
//
// The sequence, with raw group requests so no client logic is involved:
// members A and X form a stable group; A rejoins and parks, waiting for
// X; X keeps heartbeating but does not rejoin (it is still revoking,
// within the rebalance timeout). Kafka would answer A when the rebalance
// timeout removes X. kfake drops A at its session timeout instead.
func TestKfakeDropsAMemberWaitingInJoin(t *testing.T) {
	const (
		group     = "kfake-join-divergence"
		session   = time.Second
		rebalance = 3 * time.Second
	)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// One client (one connection) per member: kfake answers a
	// connection's requests in order, so a parked join would hold up
	// every other member's requests on a shared one.
	clients := map[string]*kgo.Client{}
	client := func(member string) *kgo.Client {
		if cl, ok := clients[member]; ok {
			return cl
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequestTimeoutOverhead(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		clients[member] = cl
		return cl
	}
	ctx := context.Background()

	join := func(member string) *kmsg.JoinGroupRequest {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group = group
		req.MemberID = member
		req.ProtocolType = "consumer"
		req.SessionTimeoutMillis = int32(session.Milliseconds())
		req.RebalanceTimeoutMillis = int32(rebalance.Milliseconds())
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = "range"
		req.Protocols = append(req.Protocols, p)
		return req
	}
	// newMember takes the member-ID round trip that JoinGroup v4+ asks of
	// a dynamic member, then parks its join; the reply comes on the channel.
	type joined struct {
		resp *kmsg.JoinGroupResponse
		err  error
	}
	send := func(who string, req *kmsg.JoinGroupRequest) <-chan joined {
		ch := make(chan joined, 1)
		cl := client(who)
		go func() {
			resp, err := req.RequestWith(ctx, cl)
			ch <- joined{resp, err}
		}()
		return ch
	}
	memberID := func(who string) string {
		r := <-send(who, join(""))
		if r.err != nil || r.resp.MemberID == "" {
			t.Fatalf("first join: %v %+v", r.err, r.resp)
		}
		return r.resp.MemberID
	}
	// A forms the group alone; X's join then parks until A rejoins, and
	// both come out of that rebalance in one generation.
	heartbeat := func(who, member string, gen int32) (stop func()) {
		cl := client(who)
		hbCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for hbCtx.Err() == nil {
				req := kmsg.NewPtrHeartbeatRequest()
				req.Group, req.MemberID, req.Generation = group, member, gen
				_, _ = req.RequestWith(hbCtx, cl)
				select {
				case <-hbCtx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		return func() { cancel(); <-done }
	}
	a := memberID("A")
	if r := <-send("A", join(a)); r.err != nil || r.resp.ErrorCode != 0 {
		t.Fatalf("A's join: %v %+v", r.err, r.resp)
	}
	x := memberID("X")
	jx := send("X", join(x))
	time.Sleep(50 * time.Millisecond) // X parked before A rejoins
	ra, rx := <-send("A", join(a)), <-jx
	if ra.err != nil || rx.err != nil || ra.resp.ErrorCode != 0 || rx.resp.ErrorCode != 0 || ra.resp.Generation != rx.resp.Generation {
		t.Fatalf("joins: %v %v %+v %+v", ra.err, rx.err, ra.resp, rx.resp)
	}
	gen := ra.resp.Generation
	leader := ra.resp.LeaderID
	syncs := make(chan error, 2)
	for who, m := range map[string]string{"A": a, "X": x} {
		cl := client(who)
		req := kmsg.NewPtrSyncGroupRequest()
		req.Group, req.MemberID, req.Generation = group, m, gen
		req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		if m == leader {
			for _, mm := range []string{a, x} {
				as := kmsg.NewSyncGroupRequestGroupAssignment()
				as.MemberID = mm
				req.GroupAssignment = append(req.GroupAssignment, as)
			}
		}
		go func() {
			resp, err := req.RequestWith(ctx, cl)
			if err == nil && resp.ErrorCode != 0 {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			syncs <- err
		}()
	}
	for range 2 {
		if err := <-syncs; err != nil {
			t.Fatalf("sync: %v", err)
		}
	}

	// X heartbeats throughout and never rejoins, as a member still
	// revoking does. A heartbeats until it rejoins, as kgo does.
	stopX := heartbeat("X", x, gen)
	defer stopX()
	stopA := heartbeat("A", a, gen)
	time.Sleep(2 * session) // both well past one session: alive by heartbeats
	stopA()
	began := time.Now()
	parked := send("A", join(a)) // A rejoins and waits for X
	time.Sleep(2 * session)
	desc := kmsg.NewPtrDescribeGroupsRequest()
	desc.Groups = []string{group}
	dr, err := desc.RequestWith(ctx, client("describe"))
	if err != nil || len(dr.Groups) != 1 {
		t.Fatalf("describe: %v %+v", err, dr)
	}
	var members []string
	for _, m := range dr.Groups[0].Members {
		members = append(members, m.MemberID)
	}
	t.Logf("%v into A's parked join the group is %s with members %v (A=%s)", time.Since(began).Round(time.Millisecond), dr.Groups[0].State, members, a)
	r := <-parked
	waited := time.Since(began)
	code := int16(-1)
	if r.err == nil {
		code = r.resp.ErrorCode
	}
	t.Logf("A's parked join came back after %v: err %v, %v", waited.Round(time.Millisecond), r.err, kerr.ErrorForCode(code))
	if r.err == nil && code == 0 {
		t.Fatalf("kfake answered A's parked join with a new generation after %v: it now behaves as Apache Kafka does; "+
			"assert the crash-burst resume bound against kfake too", waited)
	}
	if slices.Contains(members, a) {
		t.Fatalf("A was still a member %v into its parked join; the divergence is elsewhere", 2*session)
	}
	if waited < rebalance {
		t.Fatalf("A's join came back after %v, before the rebalance timeout %v", waited, rebalance)
	}
}
