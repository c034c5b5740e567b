package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// Chart geometry, in pixels.
const (
	chartW     = 1400
	lineH      = 26
	rowH       = 26
	barH       = 18
	labelX     = 20
	rpsX       = 250
	rpsW       = 470
	cpuX       = 880
	cpuW       = 340
	sectionGap = 18
)

// Text sizes, in points at 72 dpi (= pixels).
const (
	textSize  = 15
	titleSize = 19
)

// chartText draws the chart's text in the Go fonts (golang.org/x/image's
// goregular and gobold, parsed with its opentype package).
type chartText struct {
	regular, bold font.Face
}

func newChartText() (*chartText, error) {
	face := func(ttf []byte, size float64) (font.Face, error) {
		f, err := opentype.Parse(ttf)
		if err != nil {
			return nil, err
		}
		return opentype.NewFace(f, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
	}
	r, err := face(goregular.TTF, textSize)
	if err != nil {
		return nil, err
	}
	b, err := face(gobold.TTF, titleSize)
	if err != nil {
		return nil, err
	}
	return &chartText{regular: r, bold: b}, nil
}

// draw writes s with its top-left corner at (x, y) and returns its width.
func (ct *chartText) draw(img *image.RGBA, face font.Face, x, y int, s string, c color.RGBA) int {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face}
	d.Dot = fixed.P(x, y+face.Metrics().Ascent.Ceil())
	d.DrawString(s)
	return d.Dot.X.Ceil() - x
}

// fill paints r with c.
func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// targetColour is the throughput bar colour of a target; a B build's
// is orange.
func targetColour(name string) color.RGBA {
	if strings.HasSuffix(name, bSuffix) {
		return color.RGBA{225, 140, 40, 255}
	}
	switch name {
	case tDirect:
		return color.RGBA{46, 139, 87, 255}
	case tNginx, tNginxTLS:
		return color.RGBA{160, 160, 160, 255}
	case tNginxLimit:
		return color.RGBA{90, 90, 90, 255}
	case tCaddy, tCaddyTLS:
		return color.RGBA{150, 90, 190, 255}
	case tFloor:
		return color.RGBA{230, 190, 60, 255}
	case tFloorRP:
		return color.RGBA{200, 150, 40, 255}
	case tExgateOff:
		return color.RGBA{130, 180, 235, 255}
	case tExgateMemory:
		return color.RGBA{60, 120, 200, 255}
	}
	return color.RGBA{20, 55, 130, 255}
}

// roleColour is the colour of a process's share of the CPU bar.
func roleColour(role string) color.RGBA {
	switch role {
	case roleProxy:
		return color.RGBA{230, 126, 34, 255}
	case roleBackend:
		return color.RGBA{39, 174, 96, 255}
	case roleRedis:
		return color.RGBA{192, 57, 43, 255}
	}
	return color.RGBA{149, 165, 166, 255}
}

// shortName is a target's label in the chart.
func shortName(name string) string {
	if base, ok := strings.CutSuffix(name, bSuffix); ok {
		return shortName(base) + " [B]"
	}
	switch name {
	case tDirect:
		return "direct"
	case tNginx:
		return "NGINX"
	case tNginxLimit:
		return "NGINX + limit_req"
	case tCaddy:
		return "Caddy"
	case tFloor:
		return "net/http floor"
	case tFloorRP:
		return "ReverseProxy floor"
	case tNginxTLS:
		return "NGINX, TLS"
	case tCaddyTLS:
		return "Caddy, TLS"
	case tExgateTLS:
		return "exgate, Redis, TLS"
	case tExgateOff:
		return "exgate, no limits"
	case tExgateMemory:
		return "exgate, memory"
	case tExgateRedis:
		return "exgate, Redis"
	case tExgateTraced:
		return "exgate, Redis, traced 1%"
	}
	return name
}

// scenarioHeading is a scenario's heading in the chart.
func scenarioHeading(name string) string {
	switch name {
	case scMarkets:
		return "GET markets, anonymous (one hot key)"
	case scOrders:
		return "POST order, one token"
	case scManyKeys:
		return "GET markets, a new token on every request (many keys)"
	case scTLS:
		return "GET markets over TLS (keep-alive)"
	}
	return name
}

// drawChart renders the results as a PNG: per scenario, one row per
// target with its throughput (left) and its CPU per request split by
// process (right), all medians of the run; then the fixed-rate run's
// latency added over direct.
func drawChart(w io.Writer, res *Results) error {
	ct, err := newChartText()
	if err != nil {
		return err
	}
	h := 3*lineH + 50
	maxCPU := 0.0
	for _, sc := range res.Scenarios {
		h += lineH + len(sc.Rows)*rowH + sectionGap
		for _, r := range sc.Rows {
			maxCPU = max(maxCPU, allCPU(&r))
		}
	}
	if fr := res.FixedRate; fr != nil {
		h += 2*lineH + len(fr.Rows)*rowH + sectionGap
	}
	colBG := color.RGBA{255, 255, 255, 255}
	colText := color.RGBA{30, 30, 30, 255}
	colMuted := color.RGBA{90, 90, 90, 255}
	colGrid := color.RGBA{210, 210, 210, 255}
	img := image.NewRGBA(image.Rect(0, 0, chartW, h))
	fill(img, img.Bounds(), colBG)

	s := res.Settings
	y := 14
	title := "exgate comparison benchmark, " + res.Generated.Format("2006-01-02 15:04 MST")
	if s.Quick {
		title += " (smoke run: too short to quote)"
	}
	ct.draw(img, ct.bold, labelX, y, title, colText)
	y += lineH + 4
	if len(res.Scenarios) == 0 { // -rate-only: no closed-loop run
		ct.draw(img, ct.regular, labelX, y, fmt.Sprintf("only the fixed-rate run, %d CPUs shared by every process; compare within the chart", res.Machine.CPUs), colMuted)
		y += lineH + 10
	} else {
		ct.draw(img, ct.regular, labelX, y, fmt.Sprintf("medians of %d interleaved runs × %s, wrk -t%d -c%d (closed loop), %d CPUs shared by every process; compare within the chart",
			s.Rounds, s.Duration, s.Threads, s.Conns, res.Machine.CPUs), colMuted)
		y += lineH + 6
		ct.draw(img, ct.bold, rpsX, y, "throughput, req/s", colText)
		x := cpuX + ct.draw(img, ct.bold, cpuX, y, "CPU µs per request:", colText) + 24
		for _, role := range roles() {
			fill(img, image.Rect(x, y+3, x+14, y+17), roleColour(role))
			x += 20 + ct.draw(img, ct.regular, x+20, y, role, colText) + 18
		}
		y += lineH + 10
	}

	for _, sc := range res.Scenarios {
		ct.draw(img, ct.bold, labelX, y, scenarioHeading(sc.Name), colText)
		y += lineH
		maxRPS := 0.0
		for _, r := range sc.Rows {
			maxRPS = max(maxRPS, r.RPS)
		}
		top := y
		for _, r := range sc.Rows {
			ct.draw(img, ct.regular, labelX+10, y+1, shortName(r.Target), colText)
			if maxRPS > 0 {
				bw := int(float64(rpsW) * r.RPS / maxRPS)
				fill(img, image.Rect(rpsX, y, rpsX+bw, y+barH), targetColour(r.Target))
				ct.draw(img, ct.regular, rpsX+bw+8, y+1, fmt.Sprintf("%.0f", r.RPS), colText)
			}
			if maxCPU > 0 {
				x := cpuX
				for _, role := range roles() {
					bw := int(float64(cpuW) * r.CPU[role] / maxCPU)
					fill(img, image.Rect(x, y, x+bw, y+barH), roleColour(role))
					x += bw
				}
				ct.draw(img, ct.regular, x+8, y+1, fmt.Sprintf("%.0f (proxy %.0f)", allCPU(&r), r.CPU[roleProxy]), colText)
			}
			y += rowH
		}
		fill(img, image.Rect(rpsX-1, top-2, rpsX, y-rowH+barH+2), colGrid)
		fill(img, image.Rect(cpuX-1, top-2, cpuX, y-rowH+barH+2), colGrid)
		y += sectionGap
	}
	if fr := res.FixedRate; fr != nil {
		drawFixedRate(img, ct, fr, y, colText, colMuted, colGrid)
	}
	return png.Encode(w, img)
}

// drawFixedRate draws the open-loop run from y: per target, the p99
// latency it adds over direct as a bar, with p50, p99 and p99.9 written.
func drawFixedRate(img *image.RGBA, ct *chartText, fr *FixedRate, y int, colText, colMuted, colGrid color.RGBA) {
	ct.draw(img, ct.bold, labelX, y, fmt.Sprintf("GET markets at a fixed %.0f req/s (open loop): latency added over direct", fr.Rate), colText)
	y += lineH
	ct.draw(img, ct.regular, labelX+10, y, fmt.Sprintf("bar: added p99, ms; medians of %d runs × %s with vegeta", fr.Rounds, fr.Duration), colMuted)
	y += lineH
	maxAdded := 0.0
	for _, r := range fr.Rows {
		maxAdded = max(maxAdded, r.AddedP99MS)
	}
	top := y
	for _, r := range fr.Rows {
		ct.draw(img, ct.regular, labelX+10, y+1, shortName(r.Target), colText)
		if r.Target == tDirect {
			ct.draw(img, ct.regular, rpsX+8, y+1, fmt.Sprintf("baseline: p50 %.2f, p99 %.2f, p99.9 %.2f ms; achieved %.0f req/s", r.P50MS, r.P99MS, r.P999MS, r.achieved()), colMuted)
		} else {
			bw := 0
			if maxAdded > 0 && r.AddedP99MS > 0 {
				bw = int(float64(rpsW) * r.AddedP99MS / maxAdded)
			}
			fill(img, image.Rect(rpsX, y, rpsX+bw, y+barH), targetColour(r.Target))
			note := ""
			if !fr.held(&r) {
				note = fmt.Sprintf("; rate not held: %.0f req/s", r.achieved())
			}
			ct.draw(img, ct.regular, rpsX+bw+8, y+1, fmt.Sprintf("%+.2f ms p99   (p50 %+.2f, p99.9 %+.2f ms%s)", r.AddedP99MS, r.AddedP50MS, r.AddedP999MS, note), colText)
		}
		y += rowH
	}
	fill(img, image.Rect(rpsX-1, top-2, rpsX, y-rowH+barH+2), colGrid)
}
