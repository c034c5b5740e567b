package config

import (
	"errors"
	"strings"
	"testing"
)

// TestIdentityChecks: the identity section and how limits use it, each
// problem named by its path with what to write instead.
func TestIdentityChecks(t *testing.T) {
	routes := `
routes:
  - name: orders
    match: POST /api/v1/odr/orders/
    auth: required
    limits: [{ key: token, rate: 10/1m }]
  - { name: default, match: "*" }
`
	tests := []struct {
		name, yaml string
		want       []string // "" means valid
	}{
		{"defaults count accounts with verification", "identity: { verify: true }", nil},
		{"written routes must say account", "identity: { verify: true }\n" + routes,
			[]string{`routes[0].limits[0].key: identity.verify counts verified accounts, not token strings: write key: account`}},
		{"account without verification", strings.Replace(routes, "key: token", "key: account", 1),
			[]string{`routes[0].limits[0].key: key: account needs identity.verify: true`}},
		{"tokens file with verification", "identity: { verify: true }\ntokens_file: t.yaml",
			[]string{`tokens_file: maps token strings to tiers, but identity.verify counts accounts: write identity.users_file`}},
		{"key without material", "identity: { jwt: { keys: [{ algorithms: [HS256] }] } }",
			[]string{`identity.jwt.keys[0]: give secret_env (an HMAC secret) or public_key_file (a PEM public key)`}},
		{"key with both", "identity: { jwt: { keys: [{ algorithms: [HS256], secret_env: S, public_key_file: k.pem }] } }",
			[]string{`identity.jwt.keys[0]: give secret_env or public_key_file, not both`}},
		{"secret for RSA", "identity: { jwt: { keys: [{ algorithms: [RS256], secret_env: S }] } }",
			[]string{`identity.jwt.keys[0].algorithms[0]: want "HS256", "HS384" or "HS512", got "RS256"`}},
		{"none for a public key", "identity: { jwt: { keys: [{ algorithms: [none], public_key_file: k.pem }] } }",
			[]string{`identity.jwt.keys[0].algorithms[0]: want "RS256"`}},
		{"no algorithms", "identity: { jwt: { keys: [{ public_key_file: k.pem }] } }",
			[]string{`identity.jwt.keys[0].algorithms: required: list the algorithms explicitly`}},
		{"jwks without algorithms", "identity: { jwt: { jwks_url: \"https://issuer/jwks\" } }",
			[]string{`identity.jwt.jwks_algorithms: required`}},
		{"floor over refresh", "identity: { jwt: { jwks_refresh: 10s, jwks_min_interval: 1m } }",
			[]string{`identity.jwt.jwks_min_interval: must not exceed identity.jwt.jwks_refresh (10s), got 1m0s`}},
		{"verify without keys", "identity: { verify: true, jwt: { keys: [] } }",
			[]string{`identity.jwt.keys: identity.verify needs a key: keys, jwks_file or jwks_url`}},
		{"integer user keys", "identity: { verify: true, jwt: { user_claim_type: integer } }", nil},
		{"unknown user claim type", "identity: { jwt: { user_claim_type: uuid } }",
			[]string{`identity.jwt.user_claim_type: want "string" or "integer", got "uuid"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.yaml), nil)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range c.Routes {
					for _, l := range r.Limits {
						if l.Key == KeyToken {
							t.Fatalf("route %s still counts tokens", r.Name)
						}
					}
				}
				return
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("errors lack %q:\n%v", w, err)
				}
			}
		})
	}
}
