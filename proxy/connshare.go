package proxy

import (
	"net/http"

	"github.com/exgate/exgate/apierror"
)

// errTooManyConnections answers the requests of a connection past its
// client's share.
var errTooManyConnections = apierror.Static(http.StatusServiceUnavailable, "too_many_connections",
	"Too many connections from your address; send your requests over the connections you hold.", "Retry-After", "1")

// checkConnShare refuses a request that came on a connection past its
// client's share, and closes the connection after the answer (for HTTP/2,
// a GOAWAY: every stream of such a connection is refused alike). It keeps
// the connection's peer, found with its share, for setClientAddress.
func (g *Gateway) checkConnShare(st *requestState, r *http.Request) *apierror.Error {
	p, ok := r.Context().Value(peerKey{}).(*connPeer)
	if !ok || p == nil {
		return nil
	}
	st.peer = p.get()
	if !p.pastShare() {
		return nil
	}
	st.rw.Header()["Connection"] = connClose
	return errTooManyConnections
}

// TooManyConnections returns the answer to a request that came on a
// connection past its client's share: 503 too_many_connections,
// Retry-After: 1. The admin listener gives it too (admin.NewServer).
func TooManyConnections() *apierror.Error { return errTooManyConnections }
