package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// dashboard is the part of a Grafana dashboard file that the picture
// needs: the variables' All values and the panels.
type dashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			AllValue string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

// gridColumns is Grafana's dashboard width in grid units.
const gridColumns = 24

func loadDashboard(path string) (*dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("%s: no panels", path)
	}
	for _, p := range d.Panels {
		// Only time series are drawn: another panel type would need its
		// own drawing, and a picture that draws it as a graph would lie.
		if p.Type != "timeseries" {
			return nil, fmt.Errorf("%s: panel %q is a %q; dashshot draws only timeseries panels", path, p.Title, p.Type)
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > gridColumns {
			return nil, fmt.Errorf("%s: panel %q: gridPos %+v is outside the %d-column grid", path, p.Title, g, gridColumns)
		}
	}
	return &d, nil
}

// variables maps each query variable to its All value, the one Grafana
// puts in a query when the variable is on All (a dashboard opened without
// a choice), plus $__rate_interval.
func (d *dashboard) variables(rateInterval time.Duration) map[string]string {
	vars := map[string]string{"__rate_interval": promDuration(rateInterval)}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			all := v.AllValue
			if all == "" {
				all = ".*"
			}
			vars[v.Name] = all
		}
	}
	return vars
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[A-Za-z]+)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)

// substitute replaces the variable references Grafana knows ($name,
// ${name}, ${name:fmt}, [[name]]) with vars; an unknown one is an error,
// since Prometheus would reject the query or, worse, match nothing.
func substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(expr, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, m)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("unknown variable %s in %q", strings.Join(missing, ", "), expr)
	}
	return out, nil
}

// promDuration writes d as Prometheus reads a range or a step: whole
// seconds, else milliseconds.
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

var legendRef = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// legend names a series as Grafana does from a target's legendFormat: a
// label missing from the series is empty. Without a format it is the
// series' label set.
func legend(format string, labels map[string]string) string {
	if format == "" || format == "__auto" {
		keys := make([]string, 0, len(labels))
		for k := range labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%q", k, labels[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	s := legendRef.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendRef.FindStringSubmatch(m)[1]]
	})
	return strings.Join(strings.Fields(s), " ")
}

// series is one line of a panel: its name and one value per step (NaN,
// written as null, where Prometheus had none).
type series struct {
	Name   string     `json:"name"`
	Values []*float64 `json:"values"`
}

// panelData is what the page draws for one panel.
type panelData struct {
	Title  string   `json:"title"`
	Unit   string   `json:"unit"`
	X, Y   int      `json:"-"`
	W, H   int      `json:"-"`
	Series []series `json:"series"`
}

// window is the time range every panel shares.
type window struct {
	start, end time.Time
	step       time.Duration
}

func (w window) times() []int64 {
	var ts []int64
	for t := w.start; !t.After(w.end); t = t.Add(w.step) {
		ts = append(ts, t.Unix())
	}
	return ts
}

// prom asks a Prometheus's HTTP API.
type prom struct {
	base   string
	client *http.Client
}

type promMatrix struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

// queryRange evaluates expr over w and lays each resulting series on w's
// steps.
func (p prom) queryRange(ctx context.Context, expr, legendFormat string, w window) ([]series, error) {
	q := url.Values{
		"query": {expr},
		"start": {strconv.FormatInt(w.start.Unix(), 10)},
		"end":   {strconv.FormatInt(w.end.Unix(), 10)},
		"step":  {promDuration(w.step)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/api/v1/query_range", strings.NewReader(q.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query_range: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("query_range: %w", err)
	}
	var m promMatrix
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("query_range answered %s: %.200s", resp.Status, body)
	}
	if m.Status != "success" {
		return nil, fmt.Errorf("query_range %q: %s: %s", expr, m.ErrorType, m.Error)
	}
	if m.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("query_range %q: result type %q, want matrix", expr, m.Data.ResultType)
	}
	ts := w.times()
	index := make(map[int64]int, len(ts))
	for i, t := range ts {
		index[t] = i
	}
	var out []series
	for _, r := range m.Data.Result {
		s := series{Name: legend(legendFormat, r.Metric), Values: make([]*float64, len(ts))}
		for _, v := range r.Values {
			t, ok := v[0].(float64)
			str, ok2 := v[1].(string)
			if !ok || !ok2 {
				return nil, fmt.Errorf("query_range %q: unexpected sample %v", expr, v)
			}
			i, ok := index[int64(t)]
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(str, 64)
			// NaN is histogram_quantile's answer where nothing was observed:
			// Grafana draws a gap there.
			if err != nil || math.IsNaN(f) {
				continue
			}
			s.Values[i] = &f
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// evaluate runs every target of every panel over w.
func evaluate(ctx context.Context, p prom, d *dashboard, vars map[string]string, w window) ([]panelData, error) {
	var out []panelData
	for _, pn := range d.Panels {
		pd := panelData{Title: pn.Title, Unit: pn.FieldConfig.Defaults.Unit,
			X: pn.GridPos.X, Y: pn.GridPos.Y, W: pn.GridPos.W, H: pn.GridPos.H}
		for _, t := range pn.Targets {
			expr, err := substitute(t.Expr, vars)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", pn.Title, err)
			}
			s, err := p.queryRange(ctx, expr, t.LegendFormat, w)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", pn.Title, err)
			}
			pd.Series = append(pd.Series, s...)
		}
		out = append(out, pd)
	}
	return out, nil
}
