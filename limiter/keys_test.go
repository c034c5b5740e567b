package limiter

import (
	"strings"
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
