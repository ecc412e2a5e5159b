package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"
)

// series is one line of a chart: y against x, in order of x. A NaN y is a gap.
type series struct {
	label string
	x, y  []float64
}

// chart is a line chart drawn with the standard library only (and the font in font.go).
type chart struct {
	title, xLabel, yLabel string
	logY                  bool // a logarithmic y axis (decades); else linear from 0
	lines                 []series
}

// palette colours the lines in order, then repeats.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

// Chart layout, in pixels.
const (
	plotLeft   = 80  // room for the y tick labels and the y axis label
	plotTop    = 40  // room for the title
	plotBottom = 50  // room for the x tick labels and the x axis label
	legendW    = 230 // the legend, right of the plot
)

// logFloor is the smallest value a logarithmic axis shows; smaller ones are drawn at it.
const logFloor = 0.1

// draw renders the chart as a w x h image.
func (c chart) draw(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	black := color.RGBA{0, 0, 0, 0xff}
	grid := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	area := image.Rect(plotLeft, plotTop, w-legendW, h-plotBottom)

	xmax, ymin, ymax := 1.0, math.Inf(1), math.Inf(-1)
	for _, l := range c.lines {
		for i, x := range l.x {
			xmax = max(xmax, x)
			if y := l.y[i]; !math.IsNaN(y) {
				ymin, ymax = min(ymin, y), max(ymax, y)
			}
		}
	}
	if math.IsInf(ymax, -1) {
		ymin, ymax = 0, 1
	}
	var yticks []float64
	var ypos func(float64) float64 // 0 at the bottom of the area, 1 at its top
	if c.logY {
		lo := math.Floor(math.Log10(max(ymin, logFloor)))
		hi := math.Ceil(math.Log10(max(ymax, logFloor)))
		if hi <= lo {
			hi = lo + 1
		}
		for e := lo; e <= hi; e++ {
			yticks = append(yticks, math.Pow(10, e))
		}
		ypos = func(y float64) float64 { return (math.Log10(max(y, logFloor)) - lo) / (hi - lo) }
	} else {
		step := niceStep(ymax / 5)
		top := math.Ceil(ymax/step) * step
		if top <= 0 {
			top = step
		}
		for v := 0.0; v <= top+step/2; v += step {
			yticks = append(yticks, v)
		}
		ypos = func(y float64) float64 { return y / top }
	}
	xstep := niceStep(xmax / 10)
	xtop := math.Ceil(xmax/xstep) * xstep
	px := func(x float64) int { return area.Min.X + int(math.Round(x/xtop*float64(area.Dx()))) }
	py := func(y float64) int { return area.Max.Y - int(math.Round(ypos(y)*float64(area.Dy()))) }

	for _, v := range yticks {
		y := py(v)
		hline(img, area.Min.X, area.Max.X, y, grid)
		label := tickLabel(v)
		drawText(img, area.Min.X-6-textWidth(label, 1), y-3, label, black, 1, false)
	}
	for v := 0.0; v <= xtop+xstep/2; v += xstep {
		x := px(v)
		vline(img, x, area.Min.Y, area.Max.Y, grid)
		label := tickLabel(v)
		drawText(img, x-textWidth(label, 1)/2, area.Max.Y+6, label, black, 1, false)
	}
	hline(img, area.Min.X, area.Max.X, area.Max.Y, black)
	vline(img, area.Min.X, area.Min.Y, area.Max.Y, black)

	drawText(img, area.Min.X, 12, c.title, black, 2, false)
	drawText(img, area.Min.X+(area.Dx()-textWidth(c.xLabel, 1))/2, h-18, c.xLabel, black, 1, false)
	drawText(img, 8, area.Min.Y+(area.Dy()+textWidth(c.yLabel, 1))/2, c.yLabel, black, 1, true)

	for i, l := range c.lines {
		col := palette[i%len(palette)]
		prev, have := image.Point{}, false
		for j, x := range l.x {
			y := l.y[j]
			if math.IsNaN(y) {
				have = false
				continue
			}
			p := image.Pt(px(x), py(y))
			if have {
				segment(img, prev, p, col)
			} else {
				dot(img, p, col)
			}
			prev, have = p, true
		}
		ly := plotTop + 6 + i*16
		lx := w - legendW + 16
		for d := 0; d < 3; d++ {
			hline(img, lx, lx+24, ly+2+d, col)
		}
		drawText(img, lx+32, ly, l.label, black, 1, false)
	}
	return img
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel renders an axis value without needless decimals.
func tickLabel(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

// dot draws a 2x2 square at p: the lines' pen.
func dot(img *image.RGBA, p image.Point, c color.Color) {
	img.Set(p.X, p.Y, c)
	img.Set(p.X+1, p.Y, c)
	img.Set(p.X, p.Y+1, c)
	img.Set(p.X+1, p.Y+1, c)
}

// segment draws a line from a to b with the 2x2 pen (Bresenham).
func segment(img *image.RGBA, a, b image.Point, c color.Color) {
	dx, dy := abs(b.X-a.X), -abs(b.Y-a.Y)
	sx, sy := 1, 1
	if a.X > b.X {
		sx = -1
	}
	if a.Y > b.Y {
		sy = -1
	}
	e := dx + dy
	for {
		dot(img, a, c)
		if a == b {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			a.X += sx
		}
		if e2 <= dx {
			e += dx
			a.Y += sy
		}
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// writePNG encodes img to path.
func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return f.Close()
}
