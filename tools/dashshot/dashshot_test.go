package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

const realDashboard = "../../helm/dedupe-proxy/dashboards/dedupe-proxy.json"

// Every query of the real dashboard file must come out of substitution
// whole: a variable left over would make Prometheus reject it, and the
// picture would show "No data" where Grafana shows data.
func TestRealDashboardQueriesSubstitute(t *testing.T) {
	d, err := loadDashboard(realDashboard)
	if err != nil {
		t.Fatal(err)
	}
	vars := d.variables(8 * time.Second)
	n := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		for _, tg := range p.Targets {
			expr, err := substitute(tg.Expr, vars)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			if strings.Contains(expr, "$") || strings.Contains(expr, "[[") {
				t.Errorf("panel %q: left over after substitution: %s", p.Title, expr)
			}
			if strings.Contains(tg.Expr, "$__rate_interval") && !strings.Contains(expr, "[8s]") {
				t.Errorf("panel %q: $__rate_interval not 8s: %s", p.Title, expr)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no targets")
	}
}

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"job": ".*", "__rate_interval": "8s"}
	for in, want := range map[string]string{
		`rate(x{job=~"$job"}[$__rate_interval])`: `rate(x{job=~".*"}[8s])`,
		`x{job=~"${job}"}`:                       `x{job=~".*"}`,
		`x{job=~"${job:regex}"}`:                 `x{job=~".*"}`,
		`x{job=~"[[job]]"}`:                      `x{job=~".*"}`,
	} {
		got, err := substitute(in, vars)
		if err != nil || got != want {
			t.Errorf("substitute(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := substitute(`x{pod=~"$pod"}`, vars); err == nil {
		t.Error("an unknown variable was not an error")
	}
}

func TestLegend(t *testing.T) {
	labels := map[string]string{"source": "orders", "result": "forwarded"}
	if got := legend("{{source}} {{ result }}", labels); got != "orders forwarded" {
		t.Errorf("got %q", got)
	}
	// No pod label outside Kubernetes: Grafana leaves it empty.
	if got := legend("{{pod}} {{source}} connected", labels); got != "orders connected" {
		t.Errorf("got %q", got)
	}
	if got := legend("", map[string]string{"op": "claim"}); got != `{op="claim"}` {
		t.Errorf("got %q", got)
	}
}

// The layout of the real file: one box per panel, inside the page, none
// overlapping another.
func TestLayoutCoversAllPanels(t *testing.T) {
	d, err := loadDashboard(realDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var panels []panelData
	for _, p := range d.Panels {
		panels = append(panels, panelData{Title: p.Title, X: p.GridPos.X, Y: p.GridPos.Y, W: p.GridPos.W, H: p.GridPos.H})
	}
	boxes, height := layout(panels)
	if len(boxes) != len(d.Panels) {
		t.Fatalf("%d boxes for %d panels", len(boxes), len(d.Panels))
	}
	for i, a := range boxes {
		if a.Left < 0 || a.Left+a.Width > pageWidth || a.Top < headerPx || a.Top+a.Height > height || a.Width <= 0 || a.ChartHeight <= 0 {
			t.Errorf("panel %q: box %+v outside the %dx%d page", a.Title, a, pageWidth, height)
		}
		for _, b := range boxes[i+1:] {
			if a.Left < b.Left+b.Width && b.Left < a.Left+a.Width && a.Top < b.Top+b.Height && b.Top < a.Top+a.Height {
				t.Errorf("panels %q and %q overlap", a.Title, b.Title)
			}
		}
	}
}

func TestLoadDashboardRefusesOtherPanelTypes(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/d.json"
	writeFile(t, path, `{"panels":[{"type":"stat","title":"Up","gridPos":{"h":4,"w":6,"x":0,"y":0}}]}`)
	if _, err := loadDashboard(path); err == nil || !strings.Contains(err.Error(), "stat") {
		t.Errorf("a stat panel: err %v", err)
	}
	writeFile(t, path, `{"panels":[{"type":"timeseries","title":"Wide","gridPos":{"h":4,"w":20,"x":12,"y":0}}]}`)
	if _, err := loadDashboard(path); err == nil {
		t.Error("a panel past column 24 was taken")
	}
}

// A panel whose queries returned no series, or only series without a
// value, says "No data" as Grafana does; one with a value does not.
func TestPageMarksEmptyPanels(t *testing.T) {
	v := 1.5
	w := window{start: time.Unix(1000, 0), end: time.Unix(1004, 0), step: 2 * time.Second}
	panels := []panelData{
		{Title: "Has data", Unit: "ops", X: 0, Y: 0, W: 12, H: 8, Series: []series{{Name: "a", Values: []*float64{nil, &v, nil}}}},
		{Title: "No series", Unit: "short", X: 12, Y: 0, W: 12, H: 8},
		{Title: "Only gaps", Unit: "s", X: 0, Y: 8, W: 24, H: 8, Series: []series{{Name: "b", Values: []*float64{nil, nil, nil}}}},
	}
	page, height, err := renderPage(pageInput{Title: "t", Window: w, Panels: panels})
	if err != nil {
		t.Fatal(err)
	}
	if height != headerPx+16*rowPx-gapPx+pagePadPx {
		t.Errorf("height %d", height)
	}
	divs := regexp.MustCompile(`(?s)<div class="panel" id="p(\d)".*?</div>\n</div>`).FindAllStringSubmatch(string(page), -1)
	if len(divs) != 3 {
		t.Fatalf("%d panels on the page, want 3:\n%s", len(divs), page)
	}
	for i, want := range []bool{false, true, true} {
		if got := strings.Contains(divs[i][0], "No data"); got != want {
			t.Errorf("panel %q: No data shown %v, want %v:\n%s", panels[i].Title, got, want, divs[i][0])
		}
	}
	if !strings.Contains(string(page), `"times":[1000,1002,1004]`) {
		t.Error("the page's data lacks the window's steps")
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
