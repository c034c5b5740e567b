package sim

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/jwttest"
	"github.com/golang-jwt/jwt/v5"
)

// orderBody is a valid limit order that rests on an empty book.
func orderBody() map[string]any {
	return map[string]any{"symbol": "BTC_USDT", "type": "limit", "side": "buy", "base_amount": "0.01", "price": "60000"}
}

func TestOrderAuth(t *testing.T) {
	h := newHarness(t, Options{}, false)
	access, refresh, err := h.sim.IssueToken("dev")
	if err != nil {
		t.Fatal(err)
	}
	other := New(Options{Secret: []byte("another secret"), Now: h.clock.Now})
	foreign, _, err := other.IssueToken("dev")
	if err != nil {
		t.Fatal(err)
	}
	forge := func(method jwt.SigningMethod, key any, c claims) string {
		s, err := jwt.NewWithClaims(method, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	valid := func(typ string, uid int64) claims {
		now := h.clock.Now()
		return claims{TokenType: typ, UserID: uid, RegisteredClaims: jwt.RegisteredClaims{
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), ID: "x",
		}}
	}
	noExp := valid("access", 1)
	noExp.ExpiresAt = nil

	tests := []struct {
		name   string
		header string // Authorization; "" sends none
		status int
		code   string
	}{
		{"valid", "Bearer " + access, 201, ""},
		{"lower-case scheme", "bearer " + access, 201, ""},
		{"missing", "", 401, "not_authenticated"},
		{"no token", "Bearer", 401, "token_not_valid"},
		{"other scheme", "Basic ZGV2OmRldg==", 401, "token_not_valid"},
		{"malformed", "Bearer not.a.jwt", 401, "token_not_valid"},
		{"extra part", "Bearer " + access + " x", 401, "token_not_valid"},
		{"wrong signature", "Bearer " + foreign, 401, "token_not_valid"},
		{"refresh as access", "Bearer " + refresh, 401, "token_not_valid"},
		{"alg none", "Bearer " + forge(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, valid("access", 1)), 401, "token_not_valid"},
		{"alg HS512", "Bearer " + forge(jwt.SigningMethodHS512, []byte(DevSecret), valid("access", 1)), 401, "token_not_valid"},
		{"forged HS256 correct key", "Bearer " + forge(jwt.SigningMethodHS256, []byte(DevSecret), valid("access", 1)), 201, ""},
		{"no expiry", "Bearer " + forge(jwt.SigningMethodHS256, []byte(DevSecret), noExp), 401, "token_not_valid"},
		{"unknown user", "Bearer " + forge(jwt.SigningMethodHS256, []byte(DevSecret), valid("access", 99)), 401, "token_not_valid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := http.Header{}
			if tt.header != "" {
				hdr.Set("Authorization", tt.header)
			}
			r := h.request(t, http.MethodPost, "/api/v1/odr/orders/", hdr, orderBody())
			if tt.status == http.StatusCreated {
				if r.status != tt.status {
					t.Fatalf("status %d: %s", r.status, r.raw)
				}
				return
			}
			wantDetail(t, r, tt.status, tt.code)
			if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="api"` {
				t.Errorf("WWW-Authenticate %q", got)
			}
		})
	}

	t.Run("expired", func(t *testing.T) {
		h := newHarness(t, Options{AccessTTL: time.Minute}, false)
		if r := h.do(t, http.MethodPost, "/api/v1/odr/orders/", h.access, orderBody()); r.status != http.StatusCreated {
			t.Fatalf("fresh token: status %d: %s", r.status, r.raw)
		}
		h.clock.Advance(time.Minute + time.Second)
		r := h.do(t, http.MethodPost, "/api/v1/odr/orders/", h.access, orderBody())
		wantDetail(t, r, http.StatusUnauthorized, "token_not_valid")
	})

	t.Run("auth before body", func(t *testing.T) {
		r := h.do(t, http.MethodPost, "/api/v1/odr/orders/", "", "not json")
		wantDetail(t, r, http.StatusUnauthorized, "not_authenticated")
	})
}

func TestAuthenticate(t *testing.T) {
	h := newHarness(t, Options{Credentials: map[string]string{"alice": "s3cret", "bob": "hunter2"}}, false)
	tests := []struct {
		name   string
		body   any
		status int
		code   string              // for 401
		fields map[string][]string // for 400
		userID int64               // for 200
	}{
		{"alice", map[string]any{"api_key": "alice", "secret_key": "s3cret"}, 200, "", nil, 1},
		{"bob", map[string]any{"api_key": "bob", "secret_key": "hunter2"}, 200, "", nil, 2},
		{"wrong secret", map[string]any{"api_key": "alice", "secret_key": "hunter2"}, 401, "authentication_failed", nil, 0},
		{"unknown key", map[string]any{"api_key": "carol", "secret_key": "s3cret"}, 401, "authentication_failed", nil, 0},
		{"empty body", nil, 400, "", map[string][]string{"api_key": {"This field is required."}, "secret_key": {"This field is required."}}, 0},
		{"missing secret", map[string]any{"api_key": "alice"}, 400, "", map[string][]string{"secret_key": {"This field is required."}}, 0},
		{"wrong types", map[string]any{"api_key": 1, "secret_key": nil}, 400, "", map[string][]string{"api_key": {"Not a valid string."}, "secret_key": {"This field may not be null."}}, 0},
		{"array", []any{}, 400, "", map[string][]string{"non_field_errors": {"Invalid data. Expected a dictionary, but got list."}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, http.MethodPost, "/api/v1/usr/authenticate/", "", tt.body)
			switch tt.status {
			case http.StatusOK:
				if r.status != http.StatusOK {
					t.Fatalf("status %d: %s", r.status, r.raw)
				}
				obj := r.object(t)
				checkFields(t, obj, map[string]string{"access": "string", "refresh": "string"})
				checkClaims(t, h, obj["access"].(string), "access", tt.userID, time.Hour)
				checkClaims(t, h, obj["refresh"].(string), "refresh", tt.userID, 24*time.Hour)
			case http.StatusUnauthorized:
				wantDetail(t, r, tt.status, tt.code)
			default:
				wantFieldErrors(t, r, tt.fields)
			}
		})
	}
	if _, _, err := h.sim.IssueToken("carol"); err == nil {
		t.Error("IssueToken of an unknown api key succeeded")
	}
}

// checkClaims parses a token with the dev secret and checks its claims.
func checkClaims(t *testing.T, h *harness, token, typ string, userID int64, ttl time.Duration) {
	t.Helper()
	var c map[string]any
	_, err := jwt.NewParser(jwt.WithTimeFunc(h.clock.Now)).ParseWithClaims(token, (*jwt.MapClaims)(&c),
		func(tok *jwt.Token) (any, error) { return []byte(DevSecret), nil })
	if err != nil {
		t.Fatalf("token %q: %v", token, err)
	}
	now := h.clock.Now().Unix()
	want := map[string]any{"token_type": typ, "user_id": float64(userID), "iat": float64(now), "exp": float64(now + int64(ttl/time.Second))}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("claim %s = %v, want %v", k, c[k], v)
		}
	}
	if jti, _ := c["jti"].(string); len(jti) != 32 {
		t.Errorf("jti %q", c["jti"])
	}
}

func TestRefresh(t *testing.T) {
	h := newHarness(t, Options{}, false)
	access, refresh, err := h.sim.IssueToken("dev")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		body    any
		advance time.Duration
		status  int
		fields  map[string][]string
	}{
		{"valid", map[string]any{"refresh": refresh}, 0, 200, nil},
		{"valid after access expiry", map[string]any{"refresh": refresh}, 2 * time.Hour, 200, nil},
		{"access token", map[string]any{"refresh": access}, 0, 401, nil},
		{"garbage", map[string]any{"refresh": "abc"}, 0, 401, nil},
		{"missing", map[string]any{}, 0, 400, map[string][]string{"refresh": {"This field is required."}}},
		{"not a string", map[string]any{"refresh": 5}, 0, 400, map[string][]string{"refresh": {"Not a valid string."}}},
		{"expired", map[string]any{"refresh": refresh}, 23 * time.Hour, 401, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.clock.Advance(tt.advance)
			r := h.do(t, http.MethodPost, "/api/v1/usr/refresh_token/", "", tt.body)
			switch tt.status {
			case http.StatusOK:
				if r.status != http.StatusOK {
					t.Fatalf("status %d: %s", r.status, r.raw)
				}
				obj := r.object(t)
				checkFields(t, obj, map[string]string{"access": "string"})
				if r := h.do(t, http.MethodPost, "/api/v1/odr/orders/", obj["access"].(string), orderBody()); r.status != http.StatusCreated {
					t.Errorf("refreshed access token rejected: %d %s", r.status, r.raw)
				}
			case http.StatusUnauthorized:
				wantDetail(t, r, tt.status, "token_not_valid")
			default:
				wantFieldErrors(t, r, tt.fields)
			}
		})
	}
}

// TestClaimsReadByExactName: the reference backend reads user_id and
// token_type by their exact names, as SimpleJWT and exgate do: a claim
// spelled USER_ID or Token_Type is another claim, whatever its place in
// the payload, and a token without the exact name is refused.
func TestClaimsReadByExactName(t *testing.T) {
	h := newHarness(t, Options{}, false)
	exp := h.clock.Now().Add(time.Hour).Unix()
	tests := []struct {
		name    string
		payload string
		user    int64 // 0: refused
	}{
		{"exact", `{"token_type":"access","user_id":1,"exp":%d}`, 1},
		{"a case variant after", `{"token_type":"access","user_id":1,"USER_ID":2,"exp":%d}`, 1},
		{"a case variant before", `{"token_type":"access","User_Id":1,"user_id":2,"exp":%d}`, 2},
		{"only a case variant", `{"token_type":"access","USER_ID":1,"exp":%d}`, 0},
		{"type in a case variant", `{"TOKEN_TYPE":"access","token_type":"refresh","user_id":1,"exp":%d}`, 0},
		{"expiry in a case variant", `{"token_type":"access","user_id":1,"EXP":%d}`, 0},
		{"user id not an integer", `{"token_type":"access","user_id":1.5,"exp":%d}`, 0},
		{"user id a string", `{"token_type":"access","user_id":"1","exp":%d}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := jwttest.SignPayload(t, jwt.SigningMethodHS256, []byte(DevSecret), fmt.Sprintf(tt.payload, exp))
			user, err := h.sim.verify(tok, accessToken)
			if tt.user == 0 {
				if err == nil {
					t.Errorf("accepted as user %d, want refused", user)
				}
				return
			}
			if err != nil || user != tt.user {
				t.Errorf("read as user %d (%v), want %d", user, err, tt.user)
			}
		})
	}
}
