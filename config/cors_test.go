package config

import (
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
