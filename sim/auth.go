package sim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Token types, as the token_type claim carries them.
const (
	accessToken  = "access"
	refreshToken = "refresh"
)

// user is one API account.
type user struct {
	id        int64
	secretKey string
}

// newUsers assigns user ids 1, 2, … to the api keys in sorted order, so
// that ids are stable across restarts.
func newUsers(creds map[string]string) map[string]user {
	keys := make([]string, 0, len(creds))
	for k := range creds {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	users := make(map[string]user, len(keys))
	for i, k := range keys {
		users[k] = user{id: int64(i + 1), secretKey: creds[k]}
	}
	return users
}

// claims are the JWT claims of access and refresh tokens, as
// djangorestframework-simplejwt writes them.
type claims struct {
	TokenType string `json:"token_type"`
	UserID    int64  `json:"user_id"`
	jwt.RegisteredClaims
}

// IssueToken returns a fresh access and refresh token for the account with
// the given api key, as /api/v1/usr/authenticate/ would.
func (s *Server) IssueToken(apiKey string) (access, refresh string, err error) {
	u, ok := s.users[apiKey]
	if !ok {
		return "", "", fmt.Errorf("sim: unknown api key %q", apiKey)
	}
	if access, err = s.sign(u.id, accessToken, s.accessTTL); err != nil {
		return "", "", err
	}
	if refresh, err = s.sign(u.id, refreshToken, s.refreshTTL); err != nil {
		return "", "", err
	}
	return access, refresh, nil
}

// sign returns a JWT of the given type for user id, valid for ttl:
// RS256 with the signing key and its kid, or HS256 with the secret.
func (s *Server) sign(userID int64, tokenType string, ttl time.Duration) (string, error) {
	now := s.now()
	jti := make([]byte, 16)
	_, _ = rand.Read(jti) // crypto/rand.Read never fails.
	c := claims{
		TokenType: tokenType,
		UserID:    userID,
		RegisteredClaims: jwt.RegisteredClaims{
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID:        hex.EncodeToString(jti),
		},
	}
	if s.rsa != nil {
		t := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		t.Header["kid"] = s.rsa.kid
		return t.SignedString(s.rsa.key)
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.secret)
}

// verify checks a token's signature (RS256 with the signing key's public
// key, else HS256), expiry and type, and returns its user id. Claims are
// read by their exact names, as SimpleJWT (PyJWT's json.loads) and exgate
// read them: decoding into a struct would match "USER_ID" or "User_Id" to
// user_id too, so a token carrying both would name one user to exgate and
// another here. A user_id must be an integer.
func (s *Server) verify(token, tokenType string) (int64, error) {
	c := jwt.MapClaims{}
	method, key := jwt.SigningMethod(jwt.SigningMethodHS256), any(s.secret)
	if s.rsa != nil {
		method, key = jwt.SigningMethodRS256, &s.rsa.key.PublicKey
	}
	_, err := jwt.ParseWithClaims(token, c,
		func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{method.Alg()}),
		jwt.WithTimeFunc(s.now),
		jwt.WithExpirationRequired(),
		jwt.WithJSONNumber(),
	)
	if err != nil {
		return 0, err
	}
	if t, _ := c["token_type"].(string); t != tokenType {
		return 0, fmt.Errorf("token has type %q, want %q", t, tokenType)
	}
	n, _ := c["user_id"].(json.Number)
	id, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || id < 1 || id > int64(len(s.users)) {
		return 0, errors.New("token has no valid user_id")
	}
	return id, nil
}

// authorize checks the request's bearer access token and returns its user
// id. Otherwise it answers 401 and returns ok false.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (userID int64, ok bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		writeUnauthorized(w, "Authentication credentials were not provided.", "not_authenticated")
		return 0, false
	}
	scheme, token, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" || strings.Contains(token, " ") {
		writeUnauthorized(w, "Given token not valid for any token type", "token_not_valid")
		return 0, false
	}
	userID, err := s.verify(token, accessToken)
	if err != nil {
		writeUnauthorized(w, "Given token not valid for any token type", "token_not_valid")
		return 0, false
	}
	return userID, true
}

func writeUnauthorized(w http.ResponseWriter, msg, code string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="api"`)
	writeJSON(w, http.StatusUnauthorized, detail{Detail: msg, Code: code})
}

// handleAuthenticate serves POST /api/v1/usr/authenticate/: it exchanges
// an api_key and secret_key for an access and a refresh token.
func (s *Server) handleAuthenticate(w http.ResponseWriter, r *http.Request, _ string) {
	obj, ok := readObject(w, r)
	if !ok {
		return
	}
	errs := fieldErrors{}
	apiKey, _ := requiredString(obj, "api_key", errs)
	secretKey, _ := requiredString(obj, "secret_key", errs)
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, errs)
		return
	}
	u, found := s.users[apiKey]
	if !found || subtle.ConstantTimeCompare([]byte(u.secretKey), []byte(secretKey)) != 1 {
		writeUnauthorized(w, "No active account found with the given credentials", "authentication_failed")
		return
	}
	access, refresh, err := s.IssueToken(apiKey)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, detail{Detail: "Internal server error."})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"access": access, "refresh": refresh})
}

// handleRefresh serves POST /api/v1/usr/refresh_token/: it exchanges a
// refresh token for a new access token.
func (s *Server) handleRefresh(w http.ResponseWriter, r *http.Request, _ string) {
	obj, ok := readObject(w, r)
	if !ok {
		return
	}
	errs := fieldErrors{}
	refresh, _ := requiredString(obj, "refresh", errs)
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, errs)
		return
	}
	userID, err := s.verify(refresh, refreshToken)
	if err != nil {
		writeUnauthorized(w, "Token is invalid or expired", "token_not_valid")
		return
	}
	access, err := s.sign(userID, accessToken, s.accessTTL)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, detail{Detail: "Internal server error."})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"access": access})
}
