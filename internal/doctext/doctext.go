// Package doctext gives the tests that hold exgate's documentation to
// its code the text they read: README.md and docs/*.md, and whether the
// words around a mention say that what it names is gone.
package doctext

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Doc is one documentation file: its name (README.md, limits.md) and
// its text.
type Doc struct {
	Name, Text string
}

// Docs returns every docs/*.md of the repository whose root is root (as
// a test's package directory reaches it: "..", "../.."), in name order,
// then README.md.
func Docs(t testing.TB, root string) []Doc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []Doc
	for _, f := range append(files, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Doc{Name: filepath.Base(f), Text: string(b)})
	}
	return out
}

// SaysGone reports whether the text around doc[start:end], within its
// paragraph and about two lines either side, matches words: whether it
// says that what the mention names was removed.
func SaysGone(doc string, start, end int, words *regexp.Regexp) bool {
	from, to := max(0, start-200), min(len(doc), end+200)
	if i := strings.LastIndex(doc[from:start], "\n\n"); i >= 0 {
		from += i
	}
	if i := strings.Index(doc[end:to], "\n\n"); i >= 0 {
		to = end + i
	}
	return words.MatchString(doc[from:to])
}
