package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// listFlag is a repeatable flag.
type listFlag []string

func (u *listFlag) String() string     { return strings.Join(*u, ",") }
func (u *listFlag) Set(v string) error { *u = append(*u, v); return nil }

// topReplica is the part of /admin/top the fleet view reads.
type topReplica struct {
	Replica string
	Started time.Time
	Windows []struct {
		Minutes int
		Seconds float64
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

// topAsked is one admin listener asked, and its answer.
type topAsked struct {
	url  string
	rep  topReplica
	err  error
	same string // the URL of an earlier answer from the same process, if any
}

// topCommand implements `exgate top` with the system's resolver.
func topCommand(ctx context.Context, args []string, getenv func(string) (string, bool), stdout, stderr io.Writer) int {
	return runTop(ctx, args, getenv, stdout, stderr, net.DefaultResolver)
}

// runTop is `exgate top`: the fleet's view of who is being throttled. It
// finds the replicas' admin listeners — named by -admin, or found in DNS
// through res: the A and AAAA records of a name (-dns, a Kubernetes
// headless Service) or its SRV records (-srv) — asks each for its
// /admin/top, lists the replicas and whether each answered, and adds the
// counts per route and identity or address (the error bounds add up
// likewise). A process reached at two addresses is counted once. The
// exit code is 1 when a replica did not answer (what the others said is
// printed all the same).
func runTop(ctx context.Context, args []string, getenv func(string) (string, bool), stdout, stderr io.Writer, res *net.Resolver) int {
	fs := flag.NewFlagSet("exgate top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var admins, dnsNames, srvNames listFlag
	fs.Var(&admins, "admin", "a replica's admin `URL`; repeat it for every replica")
	fs.Var(&dnsNames, "dns", "a `name:port` whose A and AAAA records are the replicas' admin addresses (a headless Service)")
	fs.Var(&srvNames, "srv", "an SRV record `name` whose targets are the replicas' admin listeners (_admin._tcp.exgate-admin.NAMESPACE.svc.cluster.local)")
	window := fs.Int("window", 5, "the window in `minutes`: 1, 5 or 15")
	n := fs.Int("n", 10, "how many to print per list")
	tokenEnv := fs.String("token-env", adminTokenEnv, "the environment `variable` holding the admin token")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || len(admins)+len(dnsNames)+len(srvNames) == 0 ||
		!slices.Contains([]int{1, 5, 15}, *window) {
		fmt.Fprintln(stderr, "usage: exgate top (-admin URL | -dns NAME:PORT | -srv NAME)… [-window 1|5|15] [-n 10] [-token-env VAR]")
		return 2
	}
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	token, _ := getenv(*tokenEnv)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	urls, err := discoverAdmins(ctx, res, admins, dnsNames, srvNames)
	if err != nil {
		fmt.Fprintln(stderr, "exgate top:", err)
		if len(urls) == 0 {
			return 1
		}
	}
	asked := askReplicas(ctx, urls, token)
	answered := printReplicas(stdout, stderr, asked)
	if answered == 0 {
		return 1
	}
	printFleetTop(stdout, asked, *window, *n, answered)
	if err != nil || answered < len(asked) {
		return 1
	}
	return 0
}

// discoverAdmins returns the admin URLs given and found in DNS, each
// once. A name that does not resolve is reported in the error; the
// others are still returned.
func discoverAdmins(ctx context.Context, res *net.Resolver, admins, dnsNames, srvNames []string) ([]string, error) {
	var urls []string
	add := func(u string) {
		if !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	for _, u := range admins {
		add(strings.TrimSuffix(u, "/"))
	}
	var errs []error
	for _, name := range dnsNames {
		host, port, err := net.SplitHostPort(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("-dns %s: want name:port", name))
			continue
		}
		found, err := lookupAdmins(ctx, res, host, port)
		if err != nil {
			errs = append(errs, fmt.Errorf("-dns %s: %w", name, err))
		}
		for _, u := range found {
			add(u)
		}
	}
	for _, name := range srvNames {
		_, targets, err := res.LookupSRV(ctx, "", "", name)
		if err != nil {
			errs = append(errs, fmt.Errorf("-srv %s: %w", name, err))
			continue
		}
		for _, t := range targets {
			found, err := lookupAdmins(ctx, res, t.Target, fmt.Sprint(t.Port))
			if err != nil {
				errs = append(errs, fmt.Errorf("-srv %s: target %s: %w", name, t.Target, err))
			}
			for _, u := range found {
				add(u)
			}
		}
	}
	return urls, errors.Join(errs...)
}

// lookupAdmins returns an admin URL for each address of host (its A and
// AAAA records) on port. The URL names the address, not the host: the
// admin listener answers any address, while a name it does not know is
// refused (admin.allowed_hosts).
func lookupAdmins(ctx context.Context, res *net.Resolver, host, port string) ([]string, error) {
	ips, err := res.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	urls := make([]string, 0, len(ips))
	for _, ip := range ips {
		urls = append(urls, "http://"+net.JoinHostPort(ip.Unmap().String(), port))
	}
	return urls, nil
}

// askReplicas asks every admin URL for its /admin/top at once. An answer
// from a process already heard from (same replica name and start time)
// is marked with the URL it first answered at.
func askReplicas(ctx context.Context, urls []string, token string) []topAsked {
	asked := make([]topAsked, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		asked[i].url = u
		wg.Go(func() { asked[i].err = getAdminJSON(ctx, u+"/admin/top?n=100", token, &asked[i].rep) })
	}
	wg.Wait()
	for i := range asked {
		for j := range i {
			a, b := &asked[i], &asked[j]
			if a.err == nil && b.err == nil && b.same == "" && a.rep.Replica == b.rep.Replica && a.rep.Started.Equal(b.rep.Started) {
				a.same = b.url
				break
			}
		}
	}
	return asked
}

// printReplicas lists the replicas asked and what became of each, warns
// of two processes answering under one name, and returns how many
// distinct processes answered.
func printReplicas(stdout, stderr io.Writer, asked []topAsked) int {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tADMIN\tANSWER")
	answered := 0
	names := map[string]int{}
	for _, a := range asked {
		switch {
		case a.err != nil:
			fmt.Fprintf(tw, "?\t%s\t%v\n", a.url, a.err)
		case a.same != "":
			fmt.Fprintf(tw, "%s\t%s\tthe same process as %s (counted once)\n", a.rep.Replica, a.url, a.same)
		default:
			fmt.Fprintf(tw, "%s\t%s\tok\n", a.rep.Replica, a.url)
			answered++
			names[a.rep.Replica]++
		}
	}
	_ = tw.Flush()
	if failed := 0; answered < len(asked) {
		for _, a := range asked {
			if a.err != nil {
				failed++
			}
		}
		if failed > 0 {
			fmt.Fprintf(stderr, "exgate top: %d of %d admin listeners did not answer; the sums leave them out\n", failed, len(asked))
		}
	}
	for name, k := range names {
		if k > 1 {
			fmt.Fprintf(stderr, "exgate top: %d replicas answer as %q: set replica (EXGATE_REPLICA) to tell them apart\n", k, name)
		}
	}
	return answered
}

// printFleetTop adds the answering replicas' top lists of the window and
// prints the n heaviest entries by refusals and by requests.
func printFleetTop(stdout io.Writer, asked []topAsked, window, n, answered int) {
	type key struct{ list, route, kind, id string }
	sums := map[key]topCount{}
	span := 0.0
	for _, a := range asked {
		if a.err != nil || a.same != "" {
			continue
		}
		for _, w := range a.rep.Windows {
			if w.Minutes != window {
				continue
			}
			span = max(span, w.Seconds)
			for _, r := range w.Routes {
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
	unit := "minutes"
	if window == 1 {
		unit = "minute"
	}
	fmt.Fprintf(stdout, "\n%d replicas, last %d %s (sliding: the last %s)\n", answered, window, unit, time.Duration(span*float64(time.Second)).Round(time.Second))
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
		for _, r := range rows[:min(n, len(rows))] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", r.route, r.c.Kind, r.c.ID, r.c.Count, r.c.Error)
		}
		_ = tw.Flush()
	}
}

// getAdminJSON GETs an admin API URL, with the admin token when set, into
// out. An error answer is reported with its JSON detail.
func getAdminJSON(ctx context.Context, u, token string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return ue.Err // the URL is printed beside it
	} else if err != nil {
		return err
	}
	defer res.Body.Close()
	body := io.LimitReader(res.Body, 16<<20)
	if res.StatusCode != http.StatusOK {
		var e struct{ Detail, Code string }
		if json.NewDecoder(body).Decode(&e) == nil && e.Code != "" {
			return fmt.Errorf("%s: %s (%s)", res.Status, e.Detail, e.Code)
		}
		return errors.New(res.Status)
	}
	return json.NewDecoder(body).Decode(out)
}
