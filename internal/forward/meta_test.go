package forward

import (
	"net/textproto"
	"strings"
	"testing"
)

// TestOwnMetaNamesNeedNoCheck: the names setHeaders sets without checking
// them are what the check would have let through, unchanged; any other
// spelling still goes through it.
func TestOwnMetaNamesNeedNoCheck(t *testing.T) {
	names := []string{"X-Dedupe-Source", "X-Dedupe-Broker", "X-Dedupe-Queue", "X-Dedupe-Topic", "X-Dedupe-Partition",
		"X-Dedupe-Offset", "X-Dedupe-Record-Key", "X-Dedupe-Redelivered", "X-Dedupe-Key-Reused"}
	for _, n := range names {
		if !ownMetaName(n) {
			t.Errorf("%s: not taken as the proxy's own", n)
		}
		if !validHeaderName(n) || isHopByHop(strings.ToLower(n)) || textproto.CanonicalMIMEHeaderKey(n) != n {
			t.Errorf("%s: the check would not pass it unchanged", n)
		}
	}
	for _, n := range []string{"x-dedupe-source", "X-DEDUPE-BROKER", "X-Dedupe-Source ", "Connection", ""} {
		if ownMetaName(n) {
			t.Errorf("%q taken as the proxy's own", n)
		}
	}
}
