package proxy

import (
	"net/http"
	"strings"

	"github.com/exgate/exgate/apierror"
)

var errUnderscoreHeader = apierror.Static(http.StatusBadRequest, "invalid_header",
	"Header names may not contain an underscore: a backend behind CGI or WSGI reads X_Forwarded_For as X-Forwarded-For.")

// checkHeaderNames refuses a request with a header name that contains an
// underscore. CGI, WSGI (Django), Rack and PHP name a header by its name
// in upper case with "-" turned into "_", so X_Request_ID and X-Request-ID
// become one variable: depending on the server the two are joined with a
// comma or one replaces the other. A client could add a request id, a
// forwarded address or a proto of its own to those exgate sets, or send a
// header exgate never reads under the name of one the backend does.
// NGINX drops such headers by default (underscores_in_headers off);
// exgate refuses the request, before any limit is charged.
func checkHeaderNames(h http.Header) *apierror.Error {
	for k := range h {
		if strings.IndexByte(k, '_') >= 0 {
			return errUnderscoreHeader
		}
	}
	return nil
}
