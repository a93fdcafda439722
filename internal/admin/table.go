package admin

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// WriteTable prints keys as `keys list -o table` and `keys status -o
// table` do: one row each under a header, the TTL in whole seconds
// (rounded up, so a key about to expire shows 1, not 0), "-" for what a
// key does not have.
func WriteTable(w io.Writer, rows []KeyStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSPACE\tSTATE\tTTL_SECONDS\tDIGEST\tWRITTEN_AT")
	for _, k := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", k.Key, k.Space, k.State, int64(math.Ceil(k.TTLSeconds)), dash(k.Digest), dash(k.WrittenAt))
	}
	return tw.Flush()
}

// WriteForgetTable prints what `keys forget -o table` did.
func WriteForgetTable(w io.Writer, r ForgetResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSPACE\tFORGOTTEN")
	fmt.Fprintf(tw, "%s\t%s\t%t\n", r.Key, r.Space, r.Forgotten)
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
