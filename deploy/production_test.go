package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/exgate/exgate/internal/testdeps"
)

// walkthroughBlock is one ```sh block of docs/production.md: the commands
// and the output they must print, each line of it written after "# => ".
type walkthroughBlock struct {
	script string
	want   []string
}

// walkthroughBlocks returns the ```sh blocks of the page, in order.
func walkthroughBlocks(t *testing.T, page string) []walkthroughBlock {
	t.Helper()
	var out []walkthroughBlock
	for _, m := range regexp.MustCompile("(?s)\n```sh\n(.*?)\n```").FindAllStringSubmatch(page, -1) {
		b := walkthroughBlock{script: m[1]}
		for _, l := range strings.Split(m[1], "\n") {
			if w, ok := strings.CutPrefix(l, "# => "); ok {
				b.want = append(b.want, w)
			}
		}
		out = append(out, b)
	}
	if len(out) < 10 {
		t.Fatalf("docs/production.md has %d sh blocks", len(out))
	}
	return out
}

// outputMatches reports whether line is what want shows, "…" standing for
// any text.
func outputMatches(want, line string) bool {
	parts := strings.Split(want, "…")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(line)
}

// TestProductionWalkthrough runs docs/production.md as an operator would:
// every ```sh block, in order, in one bash, from the repository's root,
// as root in network, mount and PID namespaces of its own — the page's
// fixed ports are its own, /opt is a tmpfs there, and every process it
// starts (Redis Cluster, the backend, two exgate replicas, HAProxy,
// Prometheus) ends with the namespace. Each block must print exactly
// the lines written after "# => " in it, in order ("…" matches any
// text): nothing the page does not show.
func TestProductionWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the production walkthrough (about a minute)")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("the walkthrough needs root (namespaces, /opt); CI runs as root")
		}
		t.Skip("the walkthrough needs root: it runs in namespaces of its own and writes /opt")
	}
	for tool, pkg := range map[string]string{
		"unshare": "util-linux", "ip": "iproute2", "openssl": "openssl", "curl": "curl", "make": "make", "git": "git",
		"redis-server": "redis-server", "redis-cli": "redis-tools", "haproxy": "haproxy",
		"prometheus": "prometheus", "promtool": "prometheus",
	} {
		testdeps.Command(t, tool, pkg)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks := walkthroughBlocks(t, readFile(t, "../docs/production.md"))
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	// On failure, what the page's processes logged.
	script.WriteString(`trap 'rc=$?; if [ $rc -ne 0 ]; then echo "@@failed $rc"; tail -n 15 /opt/exgate/var/log/*.log /opt/exgate/var/redis/7001/redis.log 2>/dev/null; fi' EXIT` + "\n")
	script.WriteString("ip link set lo up\nmount -t tmpfs tmpfs /opt\ncd " + root + "\n")
	for i, b := range blocks {
		fmt.Fprintf(&script, "echo '@@block %d'\n%s\n", i, b.script)
	}
	script.WriteString("echo '@@end'\n")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
		"bash", "-c", script.String())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "@@end\n") {
		t.Fatalf("the walkthrough failed: %v\n%s", err, out)
	}
	got := map[int][]string{}
	block := -1
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if _, err := fmt.Sscanf(l, "@@block %d", &block); err == nil || l == "@@end" {
			continue
		}
		got[block] = append(got[block], l)
	}
	for i, b := range blocks {
		lines := got[i]
		ok := len(lines) == len(b.want)
		for j := 0; ok && j < len(lines); j++ {
			ok = outputMatches(b.want[j], lines[j])
		}
		if !ok {
			t.Errorf("block %d printed:\n%s\nthe page shows:\n%s\nthe block:\n%s", i, strings.Join(lines, "\n"), strings.Join(b.want, "\n"), b.script)
		}
	}
}
