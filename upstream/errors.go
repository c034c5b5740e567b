package upstream

import (
	"errors"
	"net"
)

// NothingSent reports whether err, a round trip's error, proves that no
// byte of the request reached the instance: the connection was never made
// (refused, unreachable, timed out while connecting, or its name did not
// resolve). Only then may a request that is not safe to repeat, an order
// above all, be sent to another instance.
func NothingSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}
