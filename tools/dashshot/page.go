package main

import (
	"bytes"
	"html/template"
	"time"
)

// Grafana's grid: a unit of height is 30 px, and panels keep 8 px apart.
const (
	pageWidth  = 1600
	rowPx      = 30
	gapPx      = 8
	headerPx   = 76
	pagePadPx  = 8
	panelTopPx = 30 // the title bar
)

// pageInput is what one picture shows.
type pageInput struct {
	Title    string
	Vars     [][2]string // label and value, as Grafana's variable bar shows them
	Caption  string
	Window   window
	Panels   []panelData
	UPlotJS  string
	UPlotCSS string
}

// box is a panel's place on the page in pixels.
type box struct {
	Left, Top, Width, Height int
	ChartHeight              int
	NoData                   bool
	Index                    int
	panelData
}

// layout places the panels by their gridPos as Grafana does, on a page
// pageWidth wide; it returns the boxes and the page's height.
func layout(panels []panelData) ([]box, int) {
	inner := pageWidth - 2*pagePadPx
	col := float64(inner+gapPx) / gridColumns
	var boxes []box
	bottom := 0
	for i, p := range panels {
		b := box{
			Left:      pagePadPx + int(float64(p.X)*col),
			Top:       headerPx + p.Y*rowPx,
			Width:     int(float64(p.W)*col) - gapPx,
			Height:    p.H*rowPx - gapPx,
			NoData:    !hasData(p.Series),
			Index:     i,
			panelData: p,
		}
		b.ChartHeight = b.Height - panelTopPx
		boxes = append(boxes, b)
		bottom = max(bottom, b.Top+b.Height)
	}
	return boxes, bottom + pagePadPx
}

// hasData is Grafana's test for drawing a panel rather than "No data":
// some series has a value.
func hasData(ss []series) bool {
	for _, s := range ss {
		for _, v := range s.Values {
			if v != nil {
				return true
			}
		}
	}
	return false
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>{{.UPlotCSS}}</style>
<style>
body { margin: 0; background: #111217; color: #ccccdc; font: 12px "DejaVu Sans", "Liberation Sans", sans-serif; }
#page { position: relative; width: {{.Width}}px; height: {{.Height}}px; }
.top { position: absolute; left: {{.Pad}}px; right: {{.Pad}}px; top: 8px; height: 60px; }
.top h1 { font-size: 17px; font-weight: 500; margin: 0 0 8px 0; color: #d8d9da; }
.vars span { display: inline-block; border: 1px solid #2c3235; background: #181b1f; padding: 3px 8px; margin-right: 6px; border-radius: 2px; }
.vars .label { background: #22252b; color: #8e8e8e; }
.top .range { position: absolute; right: 0; top: 0; border: 1px solid #2c3235; background: #181b1f; padding: 3px 8px; }
.top .caption { position: absolute; right: 0; top: 32px; color: #8e8e8e; font-size: 11px; }
.panel { position: absolute; background: #181b1f; border: 1px solid #2c3235; border-radius: 2px; box-sizing: border-box; overflow: hidden; }
.panel .title { height: {{.TitlePx}}px; line-height: {{.TitlePx}}px; padding: 0 8px; font-weight: 500; color: #d8d9da; white-space: nowrap; overflow: hidden; }
.panel .nodata { position: absolute; top: 50%; left: 0; right: 0; text-align: center; color: #8e8e8e; font-size: 14px; }
.legend { padding: 0 8px; font-size: 11px; line-height: 16px; }
.legend span { display: inline-block; margin-right: 14px; white-space: nowrap; }
.legend i { display: inline-block; width: 14px; height: 4px; border-radius: 2px; vertical-align: middle; margin-right: 5px; }
.uplot { font-family: inherit; }
</style></head>
<body><div id="page">
<div class="top">
<h1>{{.Title}}</h1>
<div class="vars">{{range .Vars}}<span class="label">{{index . 0}}</span><span>{{index . 1}}</span>{{end}}</div>
<div class="range">{{.Range}}</div>
<div class="caption">{{.Caption}}</div>
</div>
{{range .Boxes}}<div class="panel" id="p{{.Index}}" style="left:{{.Left}}px;top:{{.Top}}px;width:{{.Width}}px;height:{{.Height}}px">
<div class="title">{{.Title}}</div>{{if .NoData}}
<div class="nodata">No data</div>{{end}}
</div>
{{end}}</div>
<script>{{.UPlotJS}}</script>
<script>
const DATA = {{.Data}};
const PALETTE = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#705DA0", "#37872D", "#FADE2A", "#447EBC", "#C15C17", "#890F02", "#0A437C", "#6D1F62", "#584477"];
function scaled(v, steps, digits) {
  const a = Math.abs(v);
  for (const [f, suffix] of steps) if (a >= f) return +(v / f).toPrecision(digits) + suffix;
  const [f, suffix] = steps[steps.length - 1];
  return +(v / f).toPrecision(digits) + suffix;
}
function fmt(unit, v) {
  if (v == null) return "";
  switch (unit) {
  case "s":
    if (v === 0) return "0 s";
    return scaled(v, [[3600, " h"], [60, " min"], [1, " s"], [1e-3, " ms"], [1e-6, " µs"], [1e-9, " ns"]], 3);
  case "ops": return scaled(v, [[1e6, " Mops/s"], [1e3, " Kops/s"], [1, " ops/s"]], 3);
  case "reqps": return scaled(v, [[1e6, " Mreq/s"], [1e3, " Kreq/s"], [1, " req/s"]], 3);
  default: return scaled(v, [[1e9, " B"], [1e6, " Mil"], [1e3, " K"], [1, ""]], 3);
  }
}
const times = DATA.times;
const measure = document.createElement("canvas").getContext("2d");
measure.font = "11px DejaVu Sans, sans-serif";
DATA.panels.forEach((p, i) => {
  if (!p.series || !p.series.some(s => s.values.some(v => v != null))) return;
  const el = document.getElementById("p" + i);
  const legend = document.createElement("div");
  legend.className = "legend";
  p.series.forEach((s, j) => {
    const item = document.createElement("span");
    const sw = document.createElement("i");
    sw.style.background = PALETTE[j % PALETTE.length];
    item.appendChild(sw);
    item.appendChild(document.createTextNode(s.name));
    legend.appendChild(item);
  });
  const holder = document.createElement("div");
  el.appendChild(holder);
  el.appendChild(legend);
  const height = DATA.boxes[i].chartHeight - legend.offsetHeight - 6;
  const width = DATA.boxes[i].width - 4;
  const opts = {
    width, height,
    legend: { show: false },
    cursor: { show: false },
    scales: { x: { time: true }, y: { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.08 : 1] } },
    axes: [
      { stroke: "#8e8e8e", grid: { stroke: "#2c3235", width: 1 }, ticks: { stroke: "#2c3235", width: 1 }, font: "11px DejaVu Sans, sans-serif",
        values: (u, splits) => splits.map(t => new Date(t * 1000).toISOString().slice(11, 19)) },
      { stroke: "#8e8e8e", grid: { stroke: "#2c3235", width: 1 }, ticks: { stroke: "#2c3235", width: 1 }, font: "11px DejaVu Sans, sans-serif",
        size: (u, values) => values ? Math.ceil(Math.max(...values.map(v => measure.measureText(v).width))) + 18 : 40,
        values: (u, splits) => splits.map(v => fmt(p.unit, v)) },
    ],
    series: [{}].concat(p.series.map((s, j) => ({ label: s.name, stroke: PALETTE[j % PALETTE.length], width: 1.5, spanGaps: false, points: { show: false } }))),
  };
  new uPlot(opts, [times].concat(p.series.map(s => s.values)), holder);
});
document.body.dataset.drawn = "yes";
</script>
</body></html>
`))

// pageData is what the page's script reads.
type pageData struct {
	Times  []int64     `json:"times"`
	Panels []panelData `json:"panels"`
	Boxes  []struct {
		Width       int `json:"width"`
		ChartHeight int `json:"chartHeight"`
	} `json:"boxes"`
}

// renderPage writes the HTML page of in; it returns the page and its
// height in pixels.
func renderPage(in pageInput) ([]byte, int, error) {
	boxes, height := layout(in.Panels)
	data := pageData{Times: in.Window.times(), Panels: in.Panels}
	for _, b := range boxes {
		data.Boxes = append(data.Boxes, struct {
			Width       int `json:"width"`
			ChartHeight int `json:"chartHeight"`
		}{b.Width, b.ChartHeight})
	}
	const tf = "2006-01-02 15:04:05"
	var buf bytes.Buffer
	err := pageTmpl.Execute(&buf, map[string]any{
		"Title":    in.Title,
		"Vars":     in.Vars,
		"Caption":  in.Caption,
		"Range":    in.Window.start.UTC().Format(tf) + " to " + in.Window.end.UTC().Format(time.TimeOnly) + " UTC",
		"Boxes":    boxes,
		"Width":    pageWidth,
		"Height":   height,
		"Pad":      pagePadPx,
		"TitlePx":  panelTopPx,
		"Data":     data,
		"UPlotJS":  template.JS(in.UPlotJS),
		"UPlotCSS": template.CSS(in.UPlotCSS),
	})
	return buf.Bytes(), height, err
}
