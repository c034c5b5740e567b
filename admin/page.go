package admin

import (
	"embed"
	"io/fs"
	"net/http"
)

// consoleFiles are the console page's assets, built into the binary: no
// external asset or CDN is ever loaded.
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP allows the page its own script, style and API only; no
// inline script or style, no frames.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// pageHandler serves the console page at / and its assets under
// /console/. The page holds no data (it asks the API, with the admin
// token when one is set), so it is served without the token.
func pageHandler() http.Handler {
	sub, _ := fs.Sub(consoleFiles, "console")
	files := http.StripPrefix("/console/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if r.URL.Path == "/" {
			http.ServeFileFS(w, r, sub, "index.html")
			return
		}
		files.ServeHTTP(w, r)
	})
}
