package proxy

import (
	"errors"
	"net/http"
)

// dropUpgrade forwards a request that asks to switch protocols (Connection:
// Upgrade with Upgrade: websocket, h2c, …) as the ordinary HTTP/1.1 request
// it also is, as a server that does not take the offer answers it (RFC 9110
// §7.8). httputil.ReverseProxy forwards the offer, and after a backend's 101
// Switching Protocols it joins the client's connection to the backend's
// byte for byte: every later request on it would reach the backend unseen,
// with no token check, rate limit, order validation or duplicate
// protection. exgate has no route that switches protocols, so the offer is
// never passed on. ReverseProxy has already removed the other hop-by-hop
// headers (HTTP2-Settings with them when the Connection header names it)
// and put back only Connection and Upgrade.
func dropUpgrade(out *http.Request) {
	if _, ok := out.Header["Upgrade"]; ok {
		delete(out.Header, "Upgrade")
		delete(out.Header, "Connection")
	}
	delete(out.Header, "Http2-Settings")
}

// errSwitchingProtocols is the error of a backend response that switches
// protocols: answered 502, the connection never joined to the client's.
var errSwitchingProtocols = errors.New("exgate upstream: the backend answered 101 Switching Protocols, which exgate never asks for")

// checkNoSwitch refuses a 101 Switching Protocols response. exgate never
// forwards an upgrade offer (dropUpgrade), so a backend that switches
// anyway is out of step with its requests.
func checkNoSwitch(res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols {
		return errSwitchingProtocols
	}
	return nil
}
