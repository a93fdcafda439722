package admin

import (
	"strings"
	"testing"
)

// The table lines its columns up and gives TTLs in whole seconds.
func TestWriteTable(t *testing.T) {
	var b strings.Builder
	err := WriteTable(&b, []KeyStatus{
		{Key: "order-1", Space: "orders", State: "done", TTLSeconds: 86399.2, Digest: "q83vEjRWeJA", WrittenAt: "2026-12-05T14:00:00Z"},
		{Key: "order-22", Space: "orders", State: "inflight", TTLSeconds: 0.4},
		{Key: "x", Space: "orders", State: "absent"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `KEY       SPACE   STATE     TTL_SECONDS  DIGEST       WRITTEN_AT
order-1   orders  done      86400        q83vEjRWeJA  2026-12-05T14:00:00Z
order-22  orders  inflight  1            -            -
x         orders  absent    0            -            -
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := WriteForgetTable(&b, ForgetResult{Key: "order-1", Space: "orders", Forgotten: true}); err != nil || b.String() != "KEY      SPACE   FORGOTTEN\norder-1  orders  true\n" {
		t.Errorf("forget table %q (%v)", b.String(), err)
	}
}
