package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// adminURLs is a repeatable -admin flag.
type adminURLs []string

func (u *adminURLs) String() string     { return strings.Join(*u, ",") }
func (u *adminURLs) Set(v string) error { *u = append(*u, v); return nil }

// topReplica is the part of /admin/top the fleet view reads.
type topReplica struct {
	Replica string
	Windows []struct {
		Minutes int
		Routes  []struct {
			Route                string
			Requests, Refused    int64
			ErrorBound           int64      `json:"error_bound"`
			IdentitiesByRefused  []topCount `json:"identities_by_refused"`
			AddressesByRefused   []topCount `json:"addresses_by_refused"`
			IdentitiesByRequests []topCount `json:"identities_by_requests"`
			AddressesByRequests  []topCount `json:"addresses_by_requests"`
		}
	}
}

// topRow is one line of the fleet's view.
type topRow struct {
	route string
	c     topCount
}

type topCount struct {
	Kind, ID     string
	Count, Error int64
}

// topCommand implements `exgate top`: the fleet's view of who is being
// throttled. It asks every replica named by -admin for its /admin/top and
// adds the counts per route and identity or address; the error bounds
// add up likewise.
func topCommand(ctx context.Context, args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exgate top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var admins adminURLs
	fs.Var(&admins, "admin", "a replica's admin `URL`; repeat it for every replica")
	window := fs.Int("window", 5, "the window in `minutes`: 1, 5 or 15")
	n := fs.Int("n", 10, "how many to print per list")
	tokenEnv := fs.String("token-env", adminTokenEnv, "the environment `variable` holding the admin token")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || len(admins) == 0 || !slices.Contains([]int{1, 5, 15}, *window) {
		fmt.Fprintln(stderr, "usage: exgate top -admin URL [-admin URL …] [-window 1|5|15] [-n 10]")
		return 2
	}
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	token, _ := getenv(*tokenEnv)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	type key struct{ list, route, kind, id string }
	sums := map[key]topCount{}
	totals := map[string][3]int64{} // route → requests, refused, error bound
	for _, u := range admins {
		var rep topReplica
		if err := getAdminJSON(ctx, strings.TrimSuffix(u, "/")+"/admin/top?n=100", token, &rep); err != nil {
			fmt.Fprintf(stderr, "exgate top: %s: %v\n", u, err)
			return 1
		}
		for _, w := range rep.Windows {
			if w.Minutes != *window {
				continue
			}
			for _, r := range w.Routes {
				t := totals[r.Route]
				totals[r.Route] = [3]int64{t[0] + r.Requests, t[1] + r.Refused, t[2] + r.ErrorBound}
				for list, cs := range map[string][]topCount{"refused": append(r.IdentitiesByRefused, r.AddressesByRefused...),
					"requests": append(r.IdentitiesByRequests, r.AddressesByRequests...)} {
					for _, c := range cs {
						k := key{list, r.Route, c.Kind, c.ID}
						s := sums[k]
						s.Kind, s.ID, s.Count, s.Error = c.Kind, c.ID, s.Count+c.Count, s.Error+c.Error
						sums[k] = s
					}
				}
			}
		}
	}
	fmt.Fprintf(stdout, "%d replicas, last %d minutes\n", len(admins), *window)
	for _, list := range []string{"refused", "requests"} {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "\nBY %s\nROUTE\tKIND\tWHO\t%s\t±\n", strings.ToUpper(list), strings.ToUpper(list))
		var rows []topRow
		for k, c := range sums {
			if k.list == list {
				rows = append(rows, topRow{k.route, c})
			}
		}
		slices.SortFunc(rows, func(a, b topRow) int {
			if a.c.Count != b.c.Count {
				return cmp.Compare(b.c.Count, a.c.Count)
			}
			return strings.Compare(a.route+a.c.ID, b.route+b.c.ID)
		})
		for _, r := range rows[:min(*n, len(rows))] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", r.route, r.c.Kind, r.c.ID, r.c.Count, r.c.Error)
		}
		_ = tw.Flush()
	}
	return 0
}

// getAdminJSON GETs an admin API URL, with the admin token when set, into
// out.
func getAdminJSON(ctx context.Context, url, token string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", res.Status)
	}
	return json.NewDecoder(io.LimitReader(res.Body, 16<<20)).Decode(out)
}
