package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// signedToken returns an HS256 access token as djangorestframework-simplejwt
// writes it.
func signedToken(t testing.TB, secret string, userID any, typ string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"token_type": typ, "user_id": userID, "exp": time.Now().Add(5 * time.Minute).Unix(),
		"iat": time.Now().Unix(), "jti": time.Now().String(),
	}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// spellings returns other spellings of a canonical JWT that lenient
// decoders read as the same token: the unused bits of the signature's last
// character set, padding, and the standard alphabet.
func spellings(token string) map[string]string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	out := map[string]string{}
	last := strings.IndexByte(alphabet, token[len(token)-1])
	sig := token[strings.LastIndexByte(token, '.')+1:]
	unused := map[int]int{2: 4, 3: 2}[len(sig)%4]
	for bits := 1; bits < 1<<unused; bits++ {
		out["unused bits "+string(rune('0'+bits))] = token[:len(token)-1] + string(alphabet[last|bits])
	}
	out["padding"] = token + strings.Repeat("=", 4-len(sig)%4)
	std := strings.NewReplacer("-", "+", "_", "/").Replace(token)
	if std == token {
		std = token[:len(token)-1] + "+" // still no token: '+' is refused
	}
	out["standard alphabet"] = std
	out["fourth segment"] = token + ".AA"
	return out
}

// TestOneTokenOneSpelling sends the canonical spelling of a token, with
// the scheme in any case, and its other spellings: the canonical one
// reaches the backend as exactly "Bearer <token>"; every other spelling is
// refused by exgate with 401 token_not_valid and reaches nothing.
func TestOneTokenOneSpelling(t *testing.T) {
	e := startLimited(t, nil, nil)
	token := signedToken(t, "s3cret", 7, "access")
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		t.Run("scheme "+scheme, func(t *testing.T) {
			res := do(t, "GET", e.url+"/api/v1/mkt/markets/", nil, "Authorization", scheme+" "+token)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			if got := e.backend.last(t).Header["Authorization"]; len(got) != 1 || got[0] != "Bearer "+token {
				t.Fatalf("backend got Authorization %q", got)
			}
		})
	}
	for name, spelled := range spellings(token) {
		t.Run(name, func(t *testing.T) {
			n := e.backend.count()
			for _, route := range []string{"GET /api/v1/mkt/markets/", "POST /api/v1/odr/orders/"} {
				method, path, _ := strings.Cut(route, " ")
				res := do(t, method, e.url+path, strings.NewReader(`{}`),
					"Authorization", "Bearer "+spelled, "Content-Type", "application/json")
				assertError(t, res, http.StatusUnauthorized, "token_not_valid")
			}
			if e.backend.count() != n {
				t.Fatal("a refused spelling reached the backend")
			}
		})
	}
}
