package proxy

import (
	"bytes"
	"encoding/json"
	"mime"
	"mime/multipart"
	"net/url"
	"strings"
)

// isMethodOverride reports whether a header of the name (canonical) is a
// method override. Frameworks behind exgate (Django middleware, Express's
// method-override, Rails, Spring's HiddenHttpMethodFilter variants) may
// honour one and run a GET as a POST or a POST as a DELETE; exgate routes,
// authenticates and limits by the request's own method, so a request that
// asks for another is refused rather than forwarded (checkHead finds
// them in scanHeader's one pass over the names).
func isMethodOverride(name string) bool {
	switch name {
	case "X-Http-Method-Override", "X-Http-Method", "X-Method-Override":
		return true
	}
	return false
}

// methodParam is the parameter frameworks read a POST's method override
// from: Laravel (and Symfony with its parameter override on) in the query
// string, the form and a JSON body's top level; Spring's
// HiddenHttpMethodFilter in the query string and the form; Rails'
// Rack::MethodOverride in the form; Express's method-override where it
// is configured to. Behind exgate a POST that names it could run as a
// DELETE, PUT or PATCH: refused, as the override headers are.
const methodParam = "_method"

// queryNamesMethod reports whether q, a query string or an
// application/x-www-form-urlencoded body, has a parameter the backend may
// read as _method (isMethodParam). Parameters are separated by "&", or
// ";" as older Rack and Python parsers also read.
func queryNamesMethod(q string) bool {
	for q != "" {
		kv := q
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			kv, q = q[:i], q[i+1:]
		} else {
			q = ""
		}
		k, _, _ := strings.Cut(kv, "=")
		if isMethodParam(k, true) {
			return true
		}
	}
	return false
}

// isMethodParam reports whether a parameter named k (percent-encoded when
// escaped is set) reaches a backend as _method: decoded, then as PHP
// registers it (leading spaces dropped, a " ", "." or "[" read as "_").
// An escape only lengthens a name, so most names are told apart by their
// length without decoding.
func isMethodParam(k string, escaped bool) bool {
	if len(k) < len(methodParam) {
		return false
	}
	if escaped && strings.ContainsAny(k, "%+") {
		if u, err := url.QueryUnescape(k); err == nil {
			k = u
		}
	}
	k = strings.TrimLeft(k, " ")
	if len(k) != len(methodParam) || k[1:] != methodParam[1:] {
		return false
	}
	switch k[0] {
	case '_', ' ', '.', '[':
		return true
	}
	return false
}

// bodyNamesMethod reports whether body, of Content-Type contentType, has a
// _method parameter a backend reads: a form's (urlencoded or multipart)
// or the top-level member of a JSON object (Laravel reads a body as JSON
// when its type contains "/json" or "+json"). Other bodies, and bodies
// that do not contain the name, in any spelling JSON allows, are not
// parsed.
func bodyNamesMethod(contentType string, body []byte) bool {
	base, _, _ := strings.Cut(contentType, ";")
	base = strings.ToLower(strings.TrimSpace(base))
	switch {
	case base == "application/x-www-form-urlencoded":
		return queryNamesMethod(string(body))
	case base == "multipart/form-data":
		return multipartNamesMethod(contentType, body)
	case strings.Contains(base, "/json") || strings.Contains(base, "+json"):
		return jsonNamesMethod(body)
	}
	return false
}

// multipartNamesMethod reports whether a multipart/form-data body has a
// field the backend reads as _method.
func multipartNamesMethod(contentType string, body []byte) bool {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil || params["boundary"] == "" {
		return false
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			return false
		}
		if isMethodParam(p.FormName(), false) {
			return true
		}
	}
}

// jsonNamesMethod reports whether body is a JSON object with a top-level
// member named _method, spelled plainly or with \u escapes.
func jsonNamesMethod(body []byte) bool {
	if !bytes.Contains(body, []byte(methodParam)) && !bytes.Contains(body, []byte(`\u`)) {
		return false
	}
	d := json.NewDecoder(bytes.NewReader(body))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return false
		}
		if k, _ := t.(string); k == methodParam {
			return true
		}
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return false
		}
	}
	return false
}
