package config

import (
	"strings"
	"testing"
	"time"
)

func TestCORSConfig(t *testing.T) {
	for _, tt := range []struct {
		cors CORS
		want string
	}{
		{CORS{AllowedOrigins: []string{"*"}, AllowCredentials: true}, "cors.allow_credentials"},
		{CORS{AllowedOrigins: []string{"https://a.example/path"}}, "cors.allowed_origins[0]"},
		{CORS{AllowedOrigins: []string{"https://A.example"}}, "cors.allowed_origins[0]"},
		{CORS{AllowedOrigins: []string{"*", "https://a.example"}}, "cors.allowed_origins[0]"},
		{CORS{AllowedOrigins: []string{"https://a.example:443"}}, "cors.allowed_origins[0]"},
		{CORS{AllowedMethods: []string{"FETCH"}}, "cors.allowed_methods[0]"},
		{CORS{AllowedHeaders: []string{"a b"}}, "cors.allowed_headers[0]"},
		{CORS{MaxAge: 48 * time.Hour}, "cors.max_age"},
	} {
		c := Default()
		c.CORS = tt.cors
		err := c.Validate()
		if err == nil {
			t.Fatalf("%+v accepted", tt.cors)
		}
		found := false
		for _, fe := range err.(Errors) {
			found = found || fe.Path == tt.want
		}
		if !found {
			t.Errorf("%+v: %v, want a problem at %s", tt.cors, err, tt.want)
		}
	}
}

// TestCORSOriginsAsBrowsersSendThem: the Origin header is compared
// exactly, and browsers send an origin in one spelling (the WHATWG URL
// serialisation); an allowed origin written in another never matches
// and is refused with the spelling to write, or why none would.
func TestCORSOriginsAsBrowsersSendThem(t *testing.T) {
	for _, tt := range []struct {
		origin, want string // want: "" accepted, else a part of the problem
	}{
		{"https://app.example.com", ""},
		{"http://127.0.0.1:3000", ""},
		{"http://[::1]:8080", ""},
		{"https://xn--bcher-kva.example", ""},
		{"http://dev_box:3000", ""},
		{"https://app.example.com:443", `browsers send this origin as "https://app.example.com"`},
		{"http://app.example.com:80", `browsers send this origin as "http://app.example.com"`},
		{"http://app.example.com:443", ""},
		{"http://127.0.0.1:03000", `browsers send this origin as "http://127.0.0.1:3000"`},
		{"http://[0:0:0:0:0:0:0:1]:8080", `browsers send this origin as "http://[::1]:8080"`},
		{"https://bücher.example", `browsers send this origin as "https://xn--bcher-kva.example"`},
		{"https://app.example.com:", "the port is empty"},
		{"https://app.example.com:70000", `port "70000" is not from 1 to 65535`},
		{"http://[fe80::1%25eth0]:8080", "IPv6 zone"},
	} {
		t.Run(tt.origin, func(t *testing.T) {
			c := Default()
			c.CORS.AllowedOrigins = []string{tt.origin}
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("problems %v, want one saying %s", err, tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), "cors.allowed_origins[0]"):
				t.Fatalf("problems %v, want one at cors.allowed_origins[0]", err)
			}
		})
	}
}
