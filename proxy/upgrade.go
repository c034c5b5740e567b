package proxy

import (
	"errors"
	"net/http"
)

// errSwitchingProtocols is the error of a backend response that switches
// protocols: answered 502, the connection never joined to the client's.
var errSwitchingProtocols = errors.New("exgate upstream: the backend answered 101 Switching Protocols, which exgate never asks for")

// checkNoSwitch refuses a 101 Switching Protocols response. exgate never
// forwards an upgrade offer (sentAs), so a backend that switches
// anyway is out of step with its requests.
func checkNoSwitch(res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols {
		return errSwitchingProtocols
	}
	return nil
}
