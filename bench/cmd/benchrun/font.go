package main

import (
	"image"
	"image/color"
)

// The chart's text is drawn with a small bitmap font (upper case, digits
// and the punctuation the chart uses), 5×7 cells drawn in this file, so
// that the benchmark needs no font package.

// glyphW and glyphH are a glyph's size in cells; glyphAdvance is the
// distance from one character to the next, in cells.
const (
	glyphW       = 5
	glyphH       = 7
	glyphAdvance = 6
)

// glyph returns the rows of r's glyph, '#' for ink; characters the font
// lacks are drawn as '?'. Lower-case letters use the upper-case glyphs.
func glyph(r rune) [glyphH]string {
	if r >= 'a' && r <= 'z' {
		r -= 'a' - 'A'
	}
	switch r {
	case ' ':
		return [glyphH]string{".....", ".....", ".....", ".....", ".....", ".....", "....."}
	case 'A':
		return [glyphH]string{".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}
	case 'B':
		return [glyphH]string{"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}
	case 'C':
		return [glyphH]string{".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}
	case 'D':
		return [glyphH]string{"####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."}
	case 'E':
		return [glyphH]string{"#####", "#....", "#....", "####.", "#....", "#....", "#####"}
	case 'F':
		return [glyphH]string{"#####", "#....", "#....", "####.", "#....", "#....", "#...."}
	case 'G':
		return [glyphH]string{".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}
	case 'H':
		return [glyphH]string{"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}
	case 'I':
		return [glyphH]string{".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}
	case 'J':
		return [glyphH]string{"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}
	case 'K':
		return [glyphH]string{"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}
	case 'L':
		return [glyphH]string{"#....", "#....", "#....", "#....", "#....", "#....", "#####"}
	case 'M':
		return [glyphH]string{"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}
	case 'N':
		return [glyphH]string{"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"}
	case 'O':
		return [glyphH]string{".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}
	case 'P':
		return [glyphH]string{"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}
	case 'Q':
		return [glyphH]string{".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}
	case 'R':
		return [glyphH]string{"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}
	case 'S':
		return [glyphH]string{".####", "#....", "#....", ".###.", "....#", "....#", "####."}
	case 'T':
		return [glyphH]string{"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}
	case 'U':
		return [glyphH]string{"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}
	case 'V':
		return [glyphH]string{"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}
	case 'W':
		return [glyphH]string{"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}
	case 'X':
		return [glyphH]string{"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}
	case 'Y':
		return [glyphH]string{"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}
	case 'Z':
		return [glyphH]string{"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}
	case '0':
		return [glyphH]string{".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}
	case '1':
		return [glyphH]string{"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}
	case '2':
		return [glyphH]string{".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}
	case '3':
		return [glyphH]string{"####.", "....#", "....#", ".###.", "....#", "....#", "####."}
	case '4':
		return [glyphH]string{"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}
	case '5':
		return [glyphH]string{"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}
	case '6':
		return [glyphH]string{"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}
	case '7':
		return [glyphH]string{"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}
	case '8':
		return [glyphH]string{".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}
	case '9':
		return [glyphH]string{".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}
	case '.':
		return [glyphH]string{".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}
	case ',':
		return [glyphH]string{".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}
	case ':':
		return [glyphH]string{".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}
	case '/':
		return [glyphH]string{".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}
	case '+':
		return [glyphH]string{".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}
	case '-':
		return [glyphH]string{".....", ".....", ".....", "#####", ".....", ".....", "....."}
	case '_':
		return [glyphH]string{".....", ".....", ".....", ".....", ".....", ".....", "#####"}
	case '(':
		return [glyphH]string{"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}
	case ')':
		return [glyphH]string{".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}
	case '[':
		return [glyphH]string{".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."}
	case ']':
		return [glyphH]string{".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."}
	case '%':
		return [glyphH]string{"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}
	case '=':
		return [glyphH]string{".....", ".....", "#####", ".....", "#####", ".....", "....."}
	case '×':
		return [glyphH]string{".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "....."}
	case '÷':
		return [glyphH]string{".....", "..#..", ".....", "#####", ".....", "..#..", "....."}
	case 'µ':
		return [glyphH]string{".....", "#..#.", "#..#.", "#..#.", "#.##.", "##.##", "#...."}
	case '≥':
		return [glyphH]string{".#...", "..#..", "...#.", "..#..", ".#...", ".....", "#####"}
	}
	return [glyphH]string{".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."}
}

// textWidth is the width in pixels of s drawn at scale.
func textWidth(s string, scale int) int {
	n := len([]rune(s))
	if n == 0 {
		return 0
	}
	return (n*glyphAdvance - (glyphAdvance - glyphW)) * scale
}

// drawText draws s with its top-left corner at (x, y), each font cell a
// scale×scale square of c.
func drawText(img *image.RGBA, x, y int, s string, scale int, c color.RGBA) {
	for _, r := range s {
		g := glyph(r)
		for row, line := range g {
			for col := 0; col < glyphW; col++ {
				if line[col] != '#' {
					continue
				}
				fill(img, image.Rect(x+col*scale, y+row*scale, x+(col+1)*scale, y+(row+1)*scale), c)
			}
		}
		x += glyphAdvance * scale
	}
}

// fill paints rectangle r of img with c.
func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}
