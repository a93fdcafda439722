package claim

import "testing"

func unres(l *localClaims, key, token string, won bool, since int) bool {
	letGo, _ := l.unreserve(key, token, won, since)
	return letGo
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Two claims of one key sent together: whichever answer is read first,
// the loser finds the key held here and waits for the winner's outcome.
func TestLocalClaimsLoserReadFirstWaitsForWinner(t *testing.T) {
	l := newLocalClaims()
	l.reserve("k") // winner
	l.reserve("k") // loser
	unres(l, "k", "loser", false, 0)
	ch := l.waitFor("k")
	if ch == nil {
		t.Fatal("the loser found nothing held here while the winner's answer was unread: it would be requeued")
	}
	unres(l, "k", "winner", true, 0)
	if closed(ch) {
		t.Fatal("the winner's claim woke the waiter before any outcome")
	}
	l.drop("k", "winner")
	if !closed(ch) {
		t.Fatal("the winner let go, the waiter still waits")
	}
	if l.waitFor("k") != nil {
		t.Fatal("the key is still recorded after its holder let go")
	}
}

func TestLocalClaimsWinnerReadFirst(t *testing.T) {
	l := newLocalClaims()
	l.reserve("k")
	l.reserve("k")
	unres(l, "k", "winner", true, 0)
	unres(l, "k", "loser", false, 0)
	ch := l.waitFor("k")
	if ch == nil || closed(ch) {
		t.Fatal("the loser does not wait for the winner")
	}
	l.drop("k", "loser") // not the holder: no effect
	if closed(ch) {
		t.Fatal("a drop by a token that does not hold the key woke the waiters")
	}
	l.drop("k", "winner")
	if !closed(ch) {
		t.Fatal("the waiter was not woken")
	}
}

// Both lost (another replica holds the key): the last answer wakes the
// waiter, which then finds nothing here and is requeued by its caller.
func TestLocalClaimsBothLost(t *testing.T) {
	l := newLocalClaims()
	l.reserve("k")
	l.reserve("k")
	unres(l, "k", "a", false, 0)
	ch := l.waitFor("k")
	if ch == nil {
		t.Fatal("a claim in flight here is not waited for")
	}
	unres(l, "k", "b", false, 0)
	if !closed(ch) {
		t.Fatal("no claim left here, the waiter still waits")
	}
	if l.waitFor("k") != nil {
		t.Fatal("an entry is left with nobody holding or claiming")
	}
}

// A claim taken over from an earlier local holder whose lease ran out
// wakes that holder's waiters.
func TestLocalClaimsTakeoverWakes(t *testing.T) {
	l := newLocalClaims()
	l.hold("k", "old")
	ch := l.waitFor("k")
	l.reserve("k")
	unres(l, "k", "new", true, 0)
	if !closed(ch) {
		t.Fatal("the takeover did not wake the old holder's waiters")
	}
	l.drop("k", "old")
	if l.waitFor("k") == nil {
		t.Fatal("the old holder's drop removed the new holder's record")
	}
}

// The holder here finished while a claim was on its way: its "busy"
// answer is reported stale, so the caller claims again instead of taking
// the key for another replica's.
func TestLocalClaimsStaleBusy(t *testing.T) {
	l := newLocalClaims()
	l.hold("k", "a")
	since := l.reserve("k")
	l.drop("k", "a")
	if !unres(l, "k", "b", false, since) {
		t.Fatal("the holder let go during the claim, the busy answer is not reported stale")
	}
	if l.waitFor("k") != nil {
		t.Fatal("an entry is left with nobody holding or claiming")
	}
	l.hold("k", "c")
	since = l.reserve("k")
	if unres(l, "k", "d", false, since) {
		t.Fatal("a busy answer reported stale while the holder still holds the key")
	}
}

// The holder lets go right after a lost claim's answer is read: the wait
// channel taken with the answer is already closed, so the caller looks
// again instead of finding nothing here and taking the key for another
// replica's.
func TestLocalClaimsHolderLetsGoRightAfterTheAnswer(t *testing.T) {
	l := newLocalClaims()
	l.hold("k", "a")
	since := l.reserve("k")
	letGo, wait := l.unreserve("k", "b", false, since)
	if letGo || wait == nil {
		t.Fatalf("a claim lost to a holder here: letGo %v, wait %v", letGo, wait)
	}
	l.drop("k", "a")
	if !closed(wait) {
		t.Fatal("the holder let go, the wait taken with the answer is still open")
	}
}
