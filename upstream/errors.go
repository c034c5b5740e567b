package upstream

import "github.com/exgate/exgate/internal/notsent"

// NothingSent reports whether err, a round trip's error, proves that no
// byte of the request reached the instance (notsent.Proves: the
// connection was never made, refused wherever it is wrapped, or its name
// did not resolve, or the TLS handshake failed exgate's verification of
// the instance's certificate or did not end within the Transport's
// TLSHandshakeTimeout, HandshakeTimedOut). Only then may a request that
// is not safe to repeat, an order above all, be sent to another instance.
// An alert the instance sends (a client certificate it refuses) is not
// such proof: in TLS 1.3 it comes after the client has finished its
// handshake and written the request. idempotency.NotSent reads the same
// list.
func NothingSent(err error) bool { return notsent.Proves(err) }

// HandshakeTimedOut reports whether err is, or wraps, net/http's error of
// a TLS handshake that did not end within Transport.TLSHandshakeTimeout:
// the request is written only once the handshake is over, so nothing of
// it was sent.
func HandshakeTimedOut(err error) bool { return notsent.HandshakeTimedOut(err) }
