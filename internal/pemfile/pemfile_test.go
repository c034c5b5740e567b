package pemfile

import (
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWhole: a file whose PEM blocks all decode is read; one with a block
// cut off (a file caught half written) or malformed is refused, wherever
// the block is, where Go's PEM readers would keep the blocks before it.
func TestWhole(t *testing.T) {
	block := func(typ string, n int) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: []byte(strings.Repeat("x", n))}))
	}
	leaf, ca := block("CERTIFICATE", 300), block("CERTIFICATE", 400)
	for _, tc := range []struct {
		name, content string
		whole         bool
	}{
		{"one block", leaf, true},
		{"a chain", leaf + ca, true},
		{"text around the blocks", "subject=api\n" + leaf + "issuer=ca\n" + ca + "\n", true},
		{"no PEM at all", "not a certificate\n", true},
		{"empty", "", true},
		{"a chain cut in its second block", leaf + ca[:len(ca)/2], false},
		{"a chain cut after its second BEGIN line", leaf + "-----BEGIN CERTIFICATE-----\n", false},
		{"a block cut off alone", leaf[:len(leaf)/2], false},
		{"a malformed block before a good one", "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n" + ca, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.pem")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			b, err := Read(path)
			if tc.whole && (err != nil || string(b) != tc.content) {
				t.Fatalf("Read = %q, %v; want the file", b, err)
			}
			if !tc.whole && (err == nil || !strings.HasPrefix(err.Error(), path+": ")) {
				t.Fatalf("Read = %v, want an error naming the file", err)
			}
		})
	}
}
