package limiter

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
)

func TestKeyer(t *testing.T) {
	if _, err := NewKeyer([]byte("short")); err == nil {
		t.Error("a 5-byte secret was accepted")
	}
	k1, _ := NewKeyer(testSecret)
	k2, _ := NewKeyer([]byte("another secret of enough length"))
	id := k1.ID("token")
	if !IsTokenID(id) || id != k1.ID("token") || id == k1.ID("token2") || id == k2.ID("token") {
		t.Errorf("ids: %s %s %s", id, k1.ID("token2"), k2.ID("token"))
	}
	if strings.Contains(id, "token") {
		t.Error("id contains the token")
	}
}

// TestKeyerIDsAreTheHMAC: token ids and account keys are the first 128
// bits of HMAC-SHA256 under the secret, in lower-case hex (what `exgate
// token-id` prints and tokens files hold), whatever the message's length
// and however many goroutines share the Keyer's pooled hashes.
func TestKeyerIDsAreTheHMAC(t *testing.T) {
	want := func(msg string) string {
		m := hmac.New(sha256.New, testSecret)
		m.Write([]byte(msg))
		return hex.EncodeToString(m.Sum(nil))[:TokenIDLen]
	}
	k, _ := NewKeyer(testSecret)
	msgs := []string{"", "t", "token", strings.Repeat("eyJhbGciOi.", 30), strings.Repeat("x", maxPooledMessage+1), "a\x00b"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				for _, m := range msgs {
					if got := k.ID(m); got != want(m) {
						t.Errorf("ID(%.20q) = %s, want %s", m, got, want(m))
						return
					}
					if got := k.AccountID(m); got != want("account\x00"+m) {
						t.Errorf("AccountID(%.20q) = %s, want %s", m, got, want("account\x00"+m))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkKeyerID measures a token id of a JWT-sized token: one HMAC,
// and the id's string as the only allocation.
func BenchmarkKeyerID(b *testing.B) {
	k, _ := NewKeyer(testSecret)
	token := strings.Repeat("eyJhbGciOi.", 20)
	b.ReportAllocs()
	for b.Loop() {
		_ = k.ID(token)
	}
}
