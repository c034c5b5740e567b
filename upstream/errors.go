package upstream

import (
	"errors"
	"net"

	"github.com/exgate/exgate/internal/notsent"
)

// NothingSent reports whether err, a round trip's error, proves that no
// byte of the request reached the instance (notsent.Proves: the
// connection was never made, refused wherever it is wrapped, or its name
// did not resolve, or the TLS handshake failed exgate's verification of
// the instance's certificate or did not end within the Transport's
// TLSHandshakeTimeout, HandshakeTimedOut). Only then may a request that
// is not safe to repeat, an order above all, be sent to another instance.
// An alert the instance sends (a client certificate it refuses,
// NeverTaken) is not such proof: in TLS 1.3 it comes after the client has finished its
// handshake and written the request. idempotency.NotSent reads the same
// list.
func NothingSent(err error) bool { return notsent.Proves(err) }

// HandshakeTimedOut reports whether err is, or wraps, net/http's error of
// a TLS handshake that did not end within Transport.TLSHandshakeTimeout:
// the request is written only once the handshake is over, so nothing of
// it was sent.
func HandshakeTimedOut(err error) bool { return notsent.HandshakeTimedOut(err) }

// NeverTaken reports whether err, a round trip's error with no answer,
// says that the instance never took the request: the connection or its
// TLS handshake failed (NothingSent), the instance refused the handshake
// (handshakeRefused), or the Transport closed the connection itself
// before the request was answered (closedUnanswered). Outlier detection
// counts such a round trip as a connect failure (Envoy's locally
// originated error: communication with the instance never began), never
// as a server error. It is no proof that nothing was sent: only
// NothingSent is.
func NeverTaken(err error) bool {
	return NothingSent(err) || handshakeRefused(err) || closedUnanswered(err)
}

// handshakeRefused reports whether err is, or wraps, a TLS alert the
// instance sent (crypto/tls's "remote error"): it refused the handshake,
// exgate's client certificate above all (none, expired, of an authority
// it does not trust). In TLS 1.2 the alert ends the handshake before the
// request is written; in TLS 1.3 it comes after the client's handshake
// has ended and the request was written, which the instance's TLS layer
// discarded unread. Either way the instance serves none of exgate's
// requests, whoever sends them.
func handshakeRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// closedUnanswered reports whether err is, or wraps, net.ErrClosed: the
// Transport closed the connection itself, on what it read from the
// instance, while it was still writing the request. A TLS 1.3 alert
// refusing exgate's client certificate, read while the request's write
// was under way, ends so: the round trip's error is then the write's
// "use of closed network connection", the alert unseen (one round trip
// in some hundreds on a loaded machine).
func closedUnanswered(err error) bool { return errors.Is(err, net.ErrClosed) }
