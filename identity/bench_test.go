package identity

import (
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/exgate/exgate/config"
)

// BenchmarkVerifyCold verifies a token without the cache, per algorithm.
func BenchmarkVerifyCold(b *testing.B) {
	k := testKeys()
	c := newClock()
	v := newVerifier(b, c, func(j *config.JWT) {
		j.Keys = append(j.Keys,
			config.JWTKey{ID: "rsa", Algorithms: []string{"RS256"}, PublicKeyFile: writePublic(b, &k.rsa.PublicKey)},
			config.JWTKey{ID: "ec", Algorithms: []string{"ES256"}, PublicKeyFile: writePublic(b, &k.ec.PublicKey)},
		)
		j.CacheSize = 0
	})
	for _, bc := range []struct {
		name  string
		token string
	}{
		{"HS256", sign(b, c, jwt.SigningMethodHS256, []byte(testSecret), "", nil)},
		{"RS256", sign(b, c, jwt.SigningMethodRS256, k.rsa, "rsa", nil)},
		{"ES256", sign(b, c, jwt.SigningMethodES256, k.ec, "ec", nil)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, r := v.Verify(bc.token); r != "" {
					b.Fatal(r)
				}
			}
		})
	}
}

// BenchmarkVerifyCached verifies a token the cache holds (target: at most
// 200 ns and no allocation): from one goroutine, and from all of them at
// once on the same token (one shard's lock shared by every core).
func BenchmarkVerifyCached(b *testing.B) {
	c := newClock()
	v := newVerifier(b, c, nil)
	tok := sign(b, c, jwt.SigningMethodHS256, []byte(testSecret), "", nil)
	if _, r := v.Verify(tok); r != "" {
		b.Fatal(r)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, r := v.Verify(tok); r != "" {
				b.Fatal(r)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, r := v.Verify(tok); r != "" {
					b.Fatal(r)
				}
			}
		})
	})
}

func TestVerifyCachedDoesNotAllocate(t *testing.T) {
	c := newClock()
	v := newVerifier(t, c, nil)
	tok := sign(t, c, jwt.SigningMethodHS256, []byte(testSecret), "", nil)
	v.Verify(tok)
	if n := testing.AllocsPerRun(100, func() { v.Verify(tok) }); n != 0 {
		t.Fatalf("a cache hit allocates %v times", n)
	}
}

// BenchmarkVerifyForged refuses the same forged RS256 token (signed by
// another key under the configured kid) again and again: with the cache
// of refused tokens off, its signature is checked at every request; with
// it on, the refusal is answered from the cache.
func BenchmarkVerifyForged(b *testing.B) {
	k := testKeys()
	c := newClock()
	for _, bc := range []struct {
		name string
		size int
	}{{"uncached", 0}, {"cached", 10000}} {
		v := newVerifier(b, c, func(j *config.JWT) {
			j.Keys = append(j.Keys, config.JWTKey{ID: "rsa", Algorithms: []string{"RS256"}, PublicKeyFile: writePublic(b, &k.rsa.PublicKey)})
			j.RefusedCacheSize = bc.size
		})
		forged := sign(b, c, jwt.SigningMethodRS256, k.rsa2, "rsa", nil)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, r := v.Verify(forged); r != ReasonSignature {
					b.Fatal(r)
				}
			}
		})
	}
}
