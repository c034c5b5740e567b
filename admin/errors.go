package admin

import (
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/exgate/exgate/apierror"
	"github.com/exgate/exgate/proxy"
)

// jsonErrors makes every error answer of the admin listener JSON in the
// one shape ({"detail","code"}): an answer of status 400 or more that h
// writes as anything but JSON — ServeMux's 404 and 405, the file
// server's 404, pprof's and promhttp's plain-text errors — is replaced
// by its JSON form, with the same status and Allow header; the plain
// text, when it says more than the status, becomes the detail.
func jsonErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jw := &jsonErrorWriter{ResponseWriter: w}
		h.ServeHTTP(jw, r)
		jw.finish(r)
	})
}

// maxErrorText bounds the plain text of an error answer kept as its
// detail.
const maxErrorText = 512

// jsonErrorWriter holds back a plain-text error answer (status and text)
// and passes every other answer through.
type jsonErrorWriter struct {
	http.ResponseWriter
	held    int // the status of a plain-text error answer held back, or 0
	text    []byte
	started bool // a final answer went through
}

func (w *jsonErrorWriter) WriteHeader(code int) {
	if w.started || w.held != 0 {
		return
	}
	if code >= 400 && !isJSON(w.Header().Get("Content-Type")) {
		w.held = code
		return
	}
	w.started = code >= 200
	w.ResponseWriter.WriteHeader(code)
}

func (w *jsonErrorWriter) Write(p []byte) (int, error) {
	if w.held != 0 {
		if room := maxErrorText - len(w.text); room > 0 {
			w.text = append(w.text, p[:min(len(p), room)]...)
		}
		return len(p), nil
	}
	w.started = true
	return w.ResponseWriter.Write(p)
}

// Flush passes a flush on unless an error answer is held back.
func (w *jsonErrorWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.held == 0 {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the connection's writer.
func (w *jsonErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the JSON form of an error answer held back.
func (w *jsonErrorWriter) finish(r *http.Request) {
	if w.held == 0 {
		return
	}
	h := w.ResponseWriter.Header()
	for _, k := range []string{"Content-Length", "Content-Type", "Content-Encoding", "Content-Disposition"} {
		delete(h, k)
	}
	e := adminError(w.held, r.Method, strings.TrimSpace(string(w.text)))
	if allow := h.Get("Allow"); allow != "" && w.held == http.StatusMethodNotAllowed {
		e = apierror.MethodNotAllowed(proxy.MethodShown(r.Method), allow)
	}
	proxy.WriteError(w.ResponseWriter, "", e)
}

// adminError is the JSON answer standing for a plain-text one: the codes
// and details exgate's own answers use for 404 and 405, else a code named
// after the status and the text as the detail.
func adminError(status int, method, text string) *apierror.Error {
	switch status {
	case http.StatusNotFound:
		if text == "" || text == "404 page not found" {
			return apierror.NotFound()
		}
		return apierror.New(status, "not_found", text)
	case http.StatusMethodNotAllowed:
		return apierror.New(status, "method_not_allowed", "Method "+strconv.Quote(proxy.MethodShown(method))+" not allowed.")
	case http.StatusInternalServerError:
		if text == "" {
			return apierror.Internal()
		}
		return apierror.New(status, "internal_error", text)
	}
	code := strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	if code == "" {
		code = "error"
	}
	if text == "" || strings.EqualFold(text, http.StatusText(status)) {
		text = http.StatusText(status) + "."
	}
	return apierror.New(status, code, text)
}

// isJSON reports whether a Content-Type is application/json.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}
