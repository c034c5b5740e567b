package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
)

// Chart geometry, in pixels.
const (
	chartW     = 1400
	textScale  = 2
	lineH      = glyphH*textScale + 8
	rowH       = 26
	barH       = 18
	labelX     = 20
	rpsX       = 250
	rpsW       = 470
	cpuX       = 900
	cpuW       = 400
	sectionGap = 18
)

// targetColour is the throughput bar colour of a target; a B build's
// is orange.
func targetColour(name string) color.RGBA {
	if strings.HasSuffix(name, bSuffix) {
		return color.RGBA{225, 140, 40, 255}
	}
	switch name {
	case tDirect:
		return color.RGBA{46, 139, 87, 255}
	case tNginx:
		return color.RGBA{160, 160, 160, 255}
	case tNginxLimit:
		return color.RGBA{90, 90, 90, 255}
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
		return "NGINX+limit_req"
	case tExgateOff:
		return "exgate, no limits"
	case tExgateMemory:
		return "exgate, memory"
	case tExgateRedis:
		return "exgate, Redis"
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
	}
	return name
}

// drawChart renders the results as a PNG: per scenario, one row per
// target with its throughput (left) and its CPU per request split by
// process (right), all medians of the run.
func drawChart(w io.Writer, res *Results) error {
	h := 3*lineH + 40
	maxCPU := 0.0
	for _, sc := range res.Scenarios {
		h += lineH + len(sc.Rows)*rowH + sectionGap
		for _, r := range sc.Rows {
			all := 0.0
			for _, role := range roles() {
				all += r.CPU[role]
			}
			maxCPU = max(maxCPU, all)
		}
	}
	colBG := color.RGBA{255, 255, 255, 255}
	colText := color.RGBA{30, 30, 30, 255}
	colMuted := color.RGBA{110, 110, 110, 255}
	colGrid := color.RGBA{225, 225, 225, 255}
	img := image.NewRGBA(image.Rect(0, 0, chartW, h))
	fill(img, img.Bounds(), colBG)

	s := res.Settings
	y := 14
	title := "exgate comparison benchmark, " + res.Generated.Format("2006-01-02 15:04 MST")
	if s.Quick {
		title += " (smoke run)"
	}
	drawText(img, labelX, y, title, textScale, colText)
	y += lineH
	drawText(img, labelX, y, fmt.Sprintf("medians of %d runs × %s, wrk -t%d -c%d, %d CPUs shared by all processes",
		s.Rounds, s.Duration, s.Threads, s.Conns, res.Machine.CPUs), textScale, colMuted)
	y += lineH + 6
	drawText(img, rpsX, y, "throughput, req/s", textScale, colText)
	drawText(img, cpuX-130, y, "CPU µs/req:", textScale, colText)
	x := cpuX + 10
	for _, role := range roles() {
		fill(img, image.Rect(x, y, x+14, y+14), roleColour(role))
		drawText(img, x+20, y, role, textScale, colText)
		x += 20 + textWidth(role, textScale) + 24
	}
	y += lineH + 10

	for _, sc := range res.Scenarios {
		drawText(img, labelX, y, scenarioHeading(sc.Name), textScale, colText)
		y += lineH
		maxRPS := 0.0
		for _, r := range sc.Rows {
			maxRPS = max(maxRPS, r.RPS)
		}
		top := y
		for _, r := range sc.Rows {
			drawText(img, labelX+10, y+2, shortName(r.Target), textScale, colMuted)
			if maxRPS > 0 {
				bw := int(float64(rpsW) * r.RPS / maxRPS)
				fill(img, image.Rect(rpsX, y, rpsX+bw, y+barH), targetColour(r.Target))
				drawText(img, rpsX+bw+8, y+2, fmt.Sprintf("%.0f", r.RPS), textScale, colText)
			}
			if maxCPU > 0 {
				x, all := cpuX, 0.0
				for _, role := range roles() {
					v := r.CPU[role]
					all += v
					bw := int(float64(cpuW) * v / maxCPU)
					fill(img, image.Rect(x, y, x+bw, y+barH), roleColour(role))
					x += bw
				}
				drawText(img, x+8, y+2, fmt.Sprintf("%.0f", all), textScale, colText)
			}
			y += rowH
		}
		fill(img, image.Rect(rpsX-1, top-2, rpsX, y-rowH+barH+2), colGrid)
		fill(img, image.Rect(cpuX-1, top-2, cpuX, y-rowH+barH+2), colGrid)
		y += sectionGap
	}
	return png.Encode(w, img)
}
