package limiter

import "github.com/exgate/exgate/ratelimit"

// sprayGuard returns the token-spray guard of a request with token id
// tokenID from client address addr: the address's set of token ids, of
// which rs admits max_tokens per window, so that inventing tokens cannot
// multiply an address's allowance. The store decides it with the limits
// (ratelimit.Guard); Decide caches its answer until the window ends.
func sprayGuard(rs *Rules, addr []byte, tokenID string) ratelimit.Guard {
	return ratelimit.Guard{
		Key:    KeyPrefix + "spray:" + string(addr),
		Member: tokenID,
		Max:    rs.spray.MaxTokens,
		Window: rs.spray.Window,
	}
}
