package main

import (
	"strings"
	"testing"
)

// TestTokenIDCommand checks that token-id prints one id a token, the
// same with or without "Bearer ", and refuses to run without the key
// secret.
func TestTokenIDCommand(t *testing.T) {
	var out, errOut strings.Builder
	code := tokenIDCommand(nil, secretEnv, strings.NewReader("tok-a\nBearer tok-a\n\ntok-b\n"), &out, &errOut)
	lines := strings.Fields(out.String())
	if code != 0 || len(lines) != 3 || lines[0] != lines[1] || lines[0] == lines[2] || len(lines[0]) != 32 {
		t.Errorf("token-id: code %d, out %q, err %q", code, out.String(), errOut.String())
	}
	out.Reset()
	code = tokenIDCommand(nil, func(string) (string, bool) { return "", false }, strings.NewReader("x\n"), &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "EXGATE_KEY_SECRET") {
		t.Errorf("without a secret: code %d, err %q", code, errOut.String())
	}
}
