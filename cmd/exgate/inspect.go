package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/exgate/exgate/limiter"
)

// inspectCommand implements `exgate inspect`: it asks a gateway's admin
// API where one account, token or address stands on every limit, and
// prints it as a table (or the API's JSON with -json). A raw token is
// sent in the body of a POST, never in a URL.
func inspectCommand(ctx context.Context, args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exgate inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "http://127.0.0.1:9090", "the gateway's admin `URL`")
	user := fs.String("user", "", "a verified account's user `ID` (the token's user claim)")
	account := fs.String("account", "", "an account key, or the prefix the console and access log show")
	token := fs.String("token", "", "a bearer `token` (sent in the request body, never in the URL)")
	tokenID := fs.String("token-id", "", "a token id, or the prefix the console and access log show")
	address := fs.String("address", "", "a client `IP` address")
	asJSON := fs.Bool("json", false, "print the admin API's JSON answer")
	tokenEnv := fs.String("token-env", adminTokenEnv, "the environment `variable` holding the admin token")
	usage := func() int {
		fmt.Fprintln(stderr, "usage: exgate inspect [-admin URL] (-user ID | -account KEY | -token T | -token-id ID | -address IP) [-json]")
		fmt.Fprintln(stderr, "The admin token is read from "+adminTokenEnv+" (or -token-env's variable) when the gateway requires one.")
		return 2
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return usage()
	}
	form := url.Values{}
	for k, v := range map[string]string{"user": *user, "account": *account, "token": *token, "token_id": *tokenID, "address": *address} {
		if v != "" {
			form.Set(k, v)
		}
	}
	if len(form) != 1 {
		return usage()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(*admin, "/")+"/admin/inspect", strings.NewReader(form.Encode()))
	if err != nil {
		fmt.Fprintln(stderr, "exgate inspect:", err)
		return 2
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	if tok, ok := getenv(*tokenEnv); ok && tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "exgate inspect:", err)
		return 1
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		fmt.Fprintln(stderr, "exgate inspect:", err)
		return 1
	}
	if res.StatusCode != http.StatusOK {
		var e struct{ Detail, Code string }
		_ = json.Unmarshal(body, &e)
		fmt.Fprintf(stderr, "exgate inspect: %s: %s (%s)\n", res.Status, e.Detail, e.Code)
		return 1
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return 0
	}
	var in struct {
		Subject struct{ Kind, ID string }
		Limits  []limiter.LimitState
	}
	if err := json.Unmarshal(body, &in); err != nil {
		fmt.Fprintln(stderr, "exgate inspect: unreadable answer:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s\n", in.Subject.Kind, in.Subject.ID)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tLIMIT\tKEY\tTIER\tRATE\tBURST\tREMAINING\tRETRY IN\tFULL IN\tSOURCE")
	for _, l := range in.Limits {
		tier := l.Tier
		if tier == "" {
			tier = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%s\t%d\t%d\t%s\t%s\t%s\n", l.Route, l.Limit, l.Key, tier,
			l.Rate, l.Period, l.Burst, l.Remaining, secondsText(l.RetryAfter), secondsText(l.ResetAfter), l.Source)
	}
	_ = tw.Flush()
	return 0
}

func secondsText(s float64) string {
	switch {
	case s < 0:
		return "never"
	case s == 0:
		return "now"
	}
	return strconv.FormatFloat(s, 'f', 1, 64) + "s"
}
