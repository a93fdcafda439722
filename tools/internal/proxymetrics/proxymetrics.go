// Package proxymetrics reads what a running dedupe-proxy did with its
// messages from its admin port's /metrics, for the tools that drive one
// (the demo, the dashboard picture). It is not part of the product.
package proxymetrics

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Results sums dedupe_proxy_messages_total over every source by result:
// forwarded, duplicate and dead-lettered. A proxy that cannot be reached
// reads as zeros: the callers poll, and the next read counts.
func Results(c *http.Client, admin string) (fwd, dup, dead float64) {
	resp, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "dedupe_proxy_messages_total{") {
			continue
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		switch {
		case strings.Contains(line, `result="forwarded"`):
			fwd += v
		case strings.Contains(line, `result="duplicate"`):
			dup += v
		case strings.Contains(line, `result="dead_lettered"`):
			dead += v
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return
}
