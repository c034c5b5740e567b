package proxy

import (
	"io"
	"strings"
	"testing"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/idempotency"
	"github.com/exgate/exgate/identity"
)

// userClaimSecret signs TestUserClaimSpellingsThroughGateway's tokens.
const userClaimSecret = "user-claim-secret-0123456789abcd"

// claimAnswer is what one order of TestUserClaimSpellingsThroughGateway
// is answered: its status, whether it was replayed, and the error code of
// a refusal.
type claimAnswer struct {
	status   int
	replayed bool
	code     string
}

// userClaimSteps send an order as the user claim "01" or as the JSON
// number 1, each answered as it is when the two are one account (one) or
// two (two). The order allowance is 3 an hour: the first three orders of
// "01" spend it; a replay and a refused identifier are charged nothing.
var userClaimSteps = []struct {
	name string
	user any
	body string
	one  claimAnswer
	two  claimAnswer
}{
	{"01 places o-1", "01", bulkOrder(0, "o-1"), claimAnswer{201, false, ""}, claimAnswer{201, false, ""}},
	{"1 sends o-1 again", 1, bulkOrder(0, "o-1"), claimAnswer{201, true, ""}, claimAnswer{201, false, ""}},
	{"01 places o-2", "01", bulkOrder(0, "o-2"), claimAnswer{201, false, ""}, claimAnswer{201, false, ""}},
	{"1 sends another order as o-2", 1, bulkOrder(1, "o-2"), claimAnswer{409, false, "duplicate_identifier"}, claimAnswer{201, false, ""}},
	{"01 spends the allowance", "01", bulkOrder(2, ""), claimAnswer{201, false, ""}, claimAnswer{201, false, ""}},
	{"1 orders after it", 1, bulkOrder(3, ""), claimAnswer{429, false, "throttled"}, claimAnswer{201, false, ""}},
}

// countByAccount makes the route table's per-token limits count per
// account, as Validate does for the built-in table left as it is.
func countByAccount(c *config.Config) {
	for i := range c.Routes {
		for j := range c.Routes[i].Limits {
			if l := &c.Routes[i].Limits[j]; l.Key == config.KeyToken {
				l.Key, l.Name = config.KeyAccount, config.KeyAccount
			}
		}
	}
}

// TestUserClaimSpellingsThroughGateway: with identity.jwt.user_claim_type
// integer, tokens of the user "01" and of the user 1 are one account
// through the whole gateway: the second spelling's orders draw on the
// first's allowance (refused 429 once it is spent) and its identifiers
// (an identifier the first used is replayed or refused, never placed
// twice). With the default string type they are two accounts, each with
// its own allowance and identifiers. Claims made on their own after the
// limits (memory) and riding in the limits' script run (Redis) alike.
func TestUserClaimSpellingsThroughGateway(t *testing.T) {
	for _, tc := range []struct {
		claimType  string
		oneAccount bool
		placed     int
	}{
		{config.UserClaimInteger, true, 3},
		{config.UserClaimString, false, 6},
	} {
		// Stores of their own: the account 1 of one type must not find
		// the other's claims and allowance.
		for _, m := range claimModes(t) {
			t.Run(m.name+"/"+tc.claimType, func(t *testing.T) {
				var cfg *config.Config
				e := startOrdersWith(t, placedBulk, func(c *config.Config) {
					cfg = c
					c.Identity.Verify = true
					c.Identity.JWT.UserClaimType = tc.claimType
					countByAccount(c)
					perHour(c, "place_order", 3)
				}, m.lim, nil, m.idem, func(o *Options) {
					v, err := identity.New(cfg.Identity.JWT, identity.Options{
						Getenv: func(string) (string, bool) { return userClaimSecret, true }, AccountKey: o.Limits.AccountID,
					})
					if err != nil {
						t.Fatal(err)
					}
					o.Verifier = v
				})
				if l := cfg.Route("place_order").Limits[0]; l.Key != config.KeyAccount {
					t.Fatalf("place_order counts by %q, want the account", l.Key)
				}
				for _, s := range userClaimSteps {
					want := s.two
					if tc.oneAccount {
						want = s.one
					}
					res := do(t, "POST", e.url+"/api/v1/odr/orders/", strings.NewReader(s.body),
						"Authorization", "Bearer "+signedToken(t, userClaimSecret, s.user, "access"), "Content-Type", "application/json")
					replayed := res.Header.Get(idempotency.ReplayedHeader) == "true"
					if want.code != "" {
						assertError(t, res, want.status, want.code)
					} else {
						io.Copy(io.Discard, res.Body)
						res.Body.Close()
					}
					if res.StatusCode != want.status || replayed != want.replayed {
						t.Errorf("%s: %d, replayed %v; want %d, replayed %v", s.name, res.StatusCode, replayed, want.status, want.replayed)
					}
				}
				if n := e.backend.count(); n != tc.placed {
					t.Errorf("the backend received %d orders, want %d", n, tc.placed)
				}
			})
		}
	}
}
