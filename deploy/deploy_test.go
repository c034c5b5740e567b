package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/testdeps"
	"github.com/exgate/exgate/internal/tlstest"
	"github.com/exgate/exgate/limiter"
)

// Tests run in deploy/; paths are relative to it, "../" is the repository.

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func exists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// decodeStrict decodes a one-document YAML file into v, refusing unknown
// fields.
func decodeStrict(t *testing.T, name string, v any) {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(readFile(t, name)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// yamlDocs decodes every document of a YAML stream into generic values,
// skipping empty documents.
func yamlDocs(t *testing.T, name string) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(readFile(t, name)))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// dig walks a generic YAML/JSON value by map keys and list indexes; it
// returns nil where the path does not exist.
func dig(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// ---- Dockerfile ---------------------------------------------------------

type instruction struct {
	cmd  string // upper case
	args string
	line int
}

type stage struct {
	base, name string
	instrs     []instruction
}

// parseDockerfile splits a Dockerfile into instructions (comments and
// parser directives dropped, continuation lines joined) and stages.
func parseDockerfile(src string) (globalArgs map[string]string, stages []*stage, err error) {
	globalArgs = map[string]string{}
	var instrs []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		instrs = append(instrs, instruction{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " "), start})
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, nil, errors.New("Dockerfile ends inside a continued line")
	}
	for _, in := range instrs {
		switch {
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			st := &stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
		case len(stages) == 0 && in.cmd == "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			globalArgs[k] = v
		case len(stages) == 0:
			return nil, nil, errors.New("instruction " + in.cmd + " before the first FROM")
		default:
			st := stages[len(stages)-1]
			st.instrs = append(st.instrs, in)
		}
	}
	return globalArgs, stages, nil
}

func (s *stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	args, stages, err := parseDockerfile(readFile(t, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]

	t.Run("builder", func(t *testing.T) {
		base := os.Expand(build.base, func(k string) string { return args[k] })
		m := regexp.MustCompile(`^golang:(\d+\.\d+)`).FindStringSubmatch(base)
		if m == nil {
			t.Fatalf("builder base %q (%s), want golang:<go version>", base, build.base)
		}
		goMod := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(readFile(t, "../go.mod"))
		if goMod == nil || goMod[1] != m[1] {
			t.Errorf("builder Go %s, go.mod says %v", m[1], goMod)
		}
		if build.name == "" {
			t.Error("builder stage is unnamed; COPY --from needs its name")
		}
		var runs []string
		for _, in := range build.all("RUN") {
			runs = append(runs, in.args)
		}
		buildRun := ""
		for _, r := range runs {
			if strings.Contains(r, "go build") {
				buildRun = r
			}
		}
		if buildRun == "" {
			t.Fatal("no RUN go build in the builder")
		}
		if !strings.Contains(buildRun, "--mount=type=cache,target=/go/pkg/mod") {
			t.Error("go build does not use a module cache mount")
		}
		outputs := checkGoBuilds(t, buildRun)
		// COPY sources exist in the repository.
		for _, in := range build.all("COPY") {
			f := strings.Fields(in.args)
			for _, src := range f[:len(f)-1] {
				if strings.HasPrefix(src, "--") {
					continue
				}
				if !exists(filepath.Join("..", src)) {
					t.Errorf("line %d: COPY source %s does not exist in the repository", in.line, src)
				}
			}
		}

		checkVersionLinked(t, build, buildRun)

		t.Run("final", func(t *testing.T) { checkDockerFinal(t, build, final, outputs) })
	})
}

// checkGoBuilds checks every go build in the builder's RUN buildRun:
// static, trimmed, stripped, one of the two commands. It returns their
// outputs, where the final stage copies from.
func checkGoBuilds(t *testing.T, buildRun string) []string {
	t.Helper()
	var outputs []string
	builds := strings.Split(buildRun, "go build")[1:]
	if len(builds) != 2 {
		t.Errorf("%d go build invocations, want 2 (exgate and exchange-sim)", len(builds))
	}
	segments := strings.Split(buildRun, "&&")
	for _, seg := range segments {
		if !strings.Contains(seg, "go build") {
			continue
		}
		if !strings.Contains(seg, "CGO_ENABLED=0") {
			t.Errorf("go build without CGO_ENABLED=0: %s", seg)
		}
		if !strings.Contains(seg, "-trimpath") {
			t.Errorf("go build without -trimpath: %s", seg)
		}
		ld := regexp.MustCompile(`-ldflags "([^"]*)"`).FindStringSubmatch(seg)
		if ld == nil || !slices.Contains(strings.Fields(ld[1]), "-s") || !slices.Contains(strings.Fields(ld[1]), "-w") {
			t.Errorf("go build without -ldflags \"-s -w\": %s", seg)
		}
		o := regexp.MustCompile(`-o (\S+) (\./cmd/\S+)`).FindStringSubmatch(seg)
		if o == nil {
			t.Errorf("go build without -o OUT ./cmd/PKG: %s", seg)
			continue
		}
		outputs = append(outputs, o[1])
		if src := readFile(t, filepath.Join("..", o[2], "main.go")); !strings.Contains(src, "package main") {
			t.Errorf("%s is not a main package", o[2])
		}
	}
	for _, want := range []string{"./cmd/exgate", "./cmd/exchange-sim"} {
		if !strings.Contains(buildRun, " "+want+" ") && !strings.HasSuffix(buildRun, " "+want) {
			t.Errorf("the builder does not build %s", want)
		}
	}
	return outputs
}

// checkVersionLinked checks that the version and commit are linked in from
// build arguments (the context has no .git), which `make image` passes from
// git.
func checkVersionLinked(t *testing.T, build *stage, buildRun string) {
	t.Helper()
	if !strings.Contains(buildRun, "-X main.version=${VERSION}") || !strings.Contains(buildRun, "-X main.revision=${REVISION}") {
		t.Error("exgate's go build does not link main.version and main.revision from VERSION and REVISION")
	}
	for _, arg := range []string{"VERSION", "REVISION"} {
		if !slices.ContainsFunc(build.all("ARG"), func(in instruction) bool { return strings.HasPrefix(in.args, arg+"=") || in.args == arg }) {
			t.Errorf("the builder declares no ARG %s", arg)
		}
	}
	mk := readFile(t, "../Makefile")
	image := mk[strings.Index(mk, "\nimage:"):]
	if i := strings.Index(image[1:], "\n\n"); i >= 0 {
		image = image[:i+1]
	}
	for _, want := range []string{"-f deploy/Dockerfile", "--build-arg VERSION=$(VERSION)", "--build-arg REVISION=$(REVISION)"} {
		if !strings.Contains(image, want) {
			t.Errorf("the Makefile's image target lacks %s:\n%s", want, image)
		}
	}
}

// checkDockerFinal checks the final stage: a minimal non-root image whose
// exec-form entrypoint is the exgate binary copied from the builder's
// outputs, exposing the traffic and admin ports.
func checkDockerFinal(t *testing.T, build, final *stage, outputs []string) {
	if !strings.HasPrefix(final.base, "gcr.io/distroless/static") && final.base != "scratch" {
		t.Errorf("final base %q, want distroless static or scratch", final.base)
	}
	users := final.all("USER")
	if len(users) == 0 {
		t.Fatal("final stage has no USER: it would run as root")
	}
	u, _, _ := strings.Cut(users[len(users)-1].args, ":")
	if n, err := strconv.Atoi(u); (err == nil && n == 0) || u == "root" || (err != nil && u != "nonroot") {
		t.Errorf("USER %q: want a non-root numeric uid", users[len(users)-1].args)
	}
	var copied []string
	for _, in := range final.all("COPY") {
		f := strings.Fields(in.args)
		if len(f) < 3 || f[0] != "--from="+build.name {
			t.Errorf("line %d: final COPY %q is not from the builder", in.line, in.args)
			continue
		}
		dst := f[len(f)-1]
		for _, src := range f[1 : len(f)-1] {
			if !slices.Contains(outputs, src) {
				t.Errorf("line %d: COPY of %s, which the builder does not produce (%v)", in.line, src, outputs)
			}
			copied = append(copied, path.Join(dst, path.Base(src)))
		}
	}
	ep := final.all("ENTRYPOINT")
	if len(ep) != 1 {
		t.Fatalf("%d ENTRYPOINTs in the final stage, want 1", len(ep))
	}
	var argv []string
	if err := json.Unmarshal([]byte(ep[0].args), &argv); err != nil || len(argv) == 0 {
		t.Fatalf("ENTRYPOINT %s: want exec form (JSON) so that SIGTERM reaches exgate", ep[0].args)
	}
	if path.Base(argv[0]) != "exgate" || !slices.Contains(copied, argv[0]) {
		t.Errorf("ENTRYPOINT %s is not the copied exgate binary (%v)", argv[0], copied)
	}
	var ports []string
	for _, in := range final.all("EXPOSE") {
		ports = append(ports, strings.Fields(in.args)...)
	}
	for _, want := range []string{"8080", "9090"} {
		if !slices.Contains(ports, want) {
			t.Errorf("EXPOSE lacks %s (%v)", want, ports)
		}
	}
}

func TestParseDockerfile(t *testing.T) {
	src := "# syntax=docker/dockerfile:1\nARG V=1\nFROM --platform=$BUILDPLATFORM img:${V} AS b\nRUN a \\\n  # inner comment\n  b\nFROM scratch\nUSER 1\n"
	args, stages, err := parseDockerfile(src)
	if err != nil {
		t.Fatal(err)
	}
	if args["V"] != "1" || len(stages) != 2 || stages[0].name != "b" || stages[0].base != "img:${V}" {
		t.Fatalf("args %v, stages %+v", args, stages)
	}
	if r := stages[0].all("RUN"); len(r) != 1 || r[0].args != "a b" {
		t.Errorf("RUN %+v, want one joined instruction", r)
	}
	if _, _, err := parseDockerfile("RUN x\n"); err == nil {
		t.Error("instruction before FROM accepted")
	}
}

// ---- .dockerignore --------------------------------------------------------

// dockerIgnored reports whether the ignore patterns exclude rel (a
// slash-separated path in the context), with Docker's semantics: a pattern
// matches the path or one of its parent directories, "**" matches any
// number of directories, and a later "!pattern" re-includes.
func dockerIgnored(patterns []string, rel string) bool {
	ignored := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		re := globRegexp(path.Clean(strings.TrimPrefix(p, "/")))
		parts := strings.Split(rel, "/")
		for i := 1; i <= len(parts); i++ {
			if re.MatchString(strings.Join(parts[:i], "/")) {
				ignored = !neg
				break
			}
		}
	}
	return ignored
}

func globRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func TestDockerIgnoreMatcher(t *testing.T) {
	pats := []string{".git", "**/testdata", "**/*_test.go", "*.md", "docs", "!docs/keep.md"}
	for _, c := range []struct {
		path string
		want bool
	}{
		{".git/HEAD", true}, {"config/testdata/full.yaml", true}, {"testdata/x", true},
		{"proxy/gateway_test.go", true}, {"proxy/gateway.go", false}, {"README.md", true},
		{"docs/ops.md", true}, {"docs/keep.md", false}, {"cmd/exgate/main.go", false},
		{"go.mod", false}, {"sub/README.md", false},
	} {
		t.Run(c.path, func(t *testing.T) {
			if got := dockerIgnored(pats, c.path); got != c.want {
				t.Errorf("ignored(%s) = %v, want %v", c.path, got, c.want)
			}
		})
	}
}

// TestDockerIgnore checks that deploy/Dockerfile.dockerignore keeps every
// file the image build needs: go.mod, go.sum and every non-test Go file of
// the module outside deploy/, and whatever a //go:embed names.
func TestDockerIgnore(t *testing.T) {
	var pats []string
	for _, l := range strings.Split(readFile(t, "Dockerfile.dockerignore"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			pats = append(pats, l)
		}
	}
	if len(pats) == 0 {
		t.Fatal("Dockerfile.dockerignore has no patterns")
	}
	needed := []string{"go.mod", "go.sum"}
	embed := regexp.MustCompile(`(?m)^//go:embed (.+)$`)
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, "../"))
		if d.IsDir() {
			if rel == ".git" || rel == "deploy" || strings.HasPrefix(d.Name(), ".") && rel != ".." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		needed = append(needed, rel)
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range embed.FindAllStringSubmatch(string(src), -1) {
			for _, e := range strings.Fields(m[1]) {
				needed = append(needed, path.Join(path.Dir(rel), e))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(needed) < 20 {
		t.Fatalf("found only %d files the build needs; the walk is broken", len(needed))
	}
	for _, n := range needed {
		if dockerIgnored(pats, n) {
			t.Errorf("Dockerfile.dockerignore excludes %s, which the build needs", n)
		}
	}
	for _, n := range []string{".git/HEAD", "README.md", "config/testdata/full.yaml"} {
		if !dockerIgnored(pats, n) {
			t.Errorf("Dockerfile.dockerignore sends %s to the build", n)
		}
	}
}

// ---- configurations -------------------------------------------------------

// envFunc returns a getenv over a fixed map.
func envFunc(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestExampleConfigLoads(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"no environment", nil},
		{"compose environment", composeEnv(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			if !config.CheckFile("examples/exgate.yaml", envFunc(c.env)).Report(&out) {
				t.Fatalf("exgate check-config examples/exgate.yaml:\n%s", out.String())
			}
			if strings.TrimSpace(out.String()) != "ok" {
				t.Errorf("check-config printed %q, want ok", out.String())
			}
		})
	}
	cfg, err := config.Load("examples/exgate.yaml", envFunc(nil))
	if err != nil {
		t.Fatal(err)
	}
	// What the example promises in its comments; check-config's "ok"
	// above had no warning: no trust lets a client choose its address.
	if cfg.Limiter.Store != config.StoreRedis || len(cfg.Limiter.Redis.Addrs) == 0 {
		t.Error("the example does not use Redis")
	}
	if len(cfg.Tiers) == 0 || cfg.TokensFile == "" {
		t.Error("the example lacks tiers or a tokens file")
	}
	tf := tokensPath(cfg.TokensFile, "examples/exgate.yaml")
	checkTokensFile(t, tf, readFile(t, tf), cfg)
}

// tokensPath resolves tokens_file as the gateway does: a relative path is
// relative to the configuration file's directory.
func tokensPath(tokensFile, configPath string) string {
	if path.IsAbs(tokensFile) {
		return tokensFile
	}
	return path.Join(path.Dir(configPath), tokensFile)
}

// TestCheckConfigCommand runs the real `exgate check-config` on the
// example, as an operator would before deploying it.
func TestCheckConfigCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/exgate")
	}
	bin := filepath.Join(t.TempDir(), "exgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/exgate")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/exgate: %v\n%s", err, out)
	}
	// The Kubernetes ConfigMap's files, laid out as the pod mounts them.
	byKind, _ := k8sObjects(t)
	dir := t.TempDir()
	for name, v := range dig(one(t, byKind, "ConfigMap"), "data").(map[string]any) {
		writeFile(t, filepath.Join(dir, name), str(v))
	}
	// The TLS Secret, laid out as the kubelet mounts it; the ConfigMap's
	// absolute paths are pointed at it.
	ca := tlstest.NewCA(t, dir)
	vol := tlstest.NewSecretVolume(t, filepath.Join(dir, "tls"), ca.Issue(dir, "api", []string{"api.example.test"}, tlstest.Options{}))
	env := []string{"PATH=" + os.Getenv("PATH"), // no EXGATE_* from the caller
		"EXGATE_SERVER_TLS_CERTIFICATES_0_CERT_FILE=" + vol.CertFile(), "EXGATE_SERVER_TLS_CERTIFICATES_0_KEY_FILE=" + vol.KeyFile()}
	for _, file := range []string{"deploy/examples/exgate.yaml", filepath.Join(dir, "exgate.yaml")} {
		cmd := exec.Command(bin, "check-config", file)
		cmd.Dir, cmd.Env = "..", env
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasSuffix(string(out), "\nok\n") { // after what it sizes (duplicate protection's shares)
			t.Errorf("exgate check-config %s: %v\n%s", file, err, out)
		}
	}

	t.Run("as the pod's user", func(t *testing.T) { checkConfigAsPodUser(t, byKind, bin, dir, vol, env) })

	t.Run("the ConfigMap's recipe", func(t *testing.T) {
		// The check the ConfigMap's comments give, run as written with
		// Debian's yq (a jq wrapper, which quotes a string unless told -r).
		testdeps.Command(t, "yq", "yq")
		var recipe string
		for _, l := range strings.Split(readFile(t, "kubernetes/configmap.yaml"), "\n") {
			if r, ok := strings.CutPrefix(l, "#   yq "); ok {
				recipe = "yq " + r
				break
			}
		}
		if recipe == "" {
			t.Fatal("configmap.yaml's comments give no yq recipe")
		}
		cmd := exec.Command("bash", "-o", "pipefail", "-c", recipe)
		cmd.Dir = ".."
		cmd.Env = []string{"PATH=" + filepath.Dir(bin) + ":" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		out, err := cmd.CombinedOutput()
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err != nil || lines[len(lines)-1] != "ok" {
			t.Errorf("%s: %v\n%s", recipe, err, out)
		}
	})
}

// checkConfigAsPodUser runs exgate check-config on the configuration in dir
// as the Deployment's user, with the files owned and moded as the kubelet
// writes them: the TLS Secret's in vol, the ConfigMap's and the CA's.
func checkConfigAsPodUser(t *testing.T, byKind map[string][]map[string]any, bin, dir string, vol *tlstest.SecretVolume, env []string) {
	// The files as the kubelet writes them: the Secret's owned by root
	// and the pod's fsGroup, with the volume's mode; exgate run as the
	// Deployment's user must read them.
	if os.Geteuid() != 0 {
		t.Skip("needs root, to own files and run exgate as the pod's user")
	}
	dep := one(t, byKind, "Deployment")
	pod := dig(dep, "spec", "template", "spec")
	c := list(dig(pod, "containers"))[0]
	u := podUser(pod, c)
	tlsVol := list(dig(pod, "volumes"))[slices.IndexFunc(list(dig(pod, "volumes")), func(v any) bool { return dig(v, "secret") != nil })]
	for _, d := range []string{filepath.Dir(dir), dir, filepath.Dir(bin), filepath.Dir(filepath.Dir(bin))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		switch {
		case err != nil || e.Type()&fs.ModeSymlink != 0:
			return err
		case e.IsDir():
			return os.Chmod(p, 0o755)
		case filepath.Dir(filepath.Dir(p)) == vol.Dir: // the Secret's files, in its ..<timestamp> directory
			if err := os.Chown(p, 0, u.fsGroup); err != nil {
				return err
			}
			return os.Chmod(p, secretFileMode(tlsVol))
		}
		return os.Chmod(p, 0o644) // the ConfigMap's, and the CA's
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "check-config", filepath.Join(dir, "exgate.yaml"))
	cmd.Dir, cmd.Env = "/", env
	groups := make([]uint32, len(u.groups))
	for i, g := range u.groups {
		groups[i] = uint32(g)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "\nok\n") {
		t.Errorf("exgate check-config as user %d (group %d, groups %v): %v\n%s", u.uid, u.gid, u.groups, err, out)
	}
}

// checkTokensFile loads a tokens file with the gateway's own loader, and
// also the example mapping in its comments (the indented block starting
// "#   tokens:"), against the tiers cfg defines.
func checkTokensFile(t *testing.T, name, data string, cfg *config.Config) {
	t.Helper()
	var tiers []string
	for tier := range cfg.Tiers {
		tiers = append(tiers, tier)
	}
	if _, err := limiter.ParseTokens(name, []byte(data), tiers); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	var example []string
	for _, l := range strings.Split(data, "\n") {
		if rest, ok := strings.CutPrefix(l, "#   "); ok && (len(example) > 0 || rest == "tokens:") {
			example = append(example, rest)
		} else if len(example) > 0 {
			break
		}
	}
	if len(example) == 0 {
		return
	}
	ids, err := limiter.ParseTokens(name+" (example in comments)", []byte(strings.Join(example, "\n")), tiers)
	if err != nil {
		t.Errorf("the example in %s's comments does not load: %v", name, err)
	} else if len(ids) == 0 {
		t.Errorf("the example in %s's comments maps no token", name)
	}
}

// ---- compose -------------------------------------------------------------

// composeEnv returns exgate's environment in compose.yaml, interpolations
// replaced by a stand-in value.
func composeEnv(t *testing.T) map[string]string {
	t.Helper()
	docs := yamlDocs(t, "compose.yaml")
	env := map[string]string{}
	for k, v := range dig(docs[0], "services", "exgate", "environment").(map[string]any) {
		env[k] = regexp.MustCompile(`\$\{[^}]*\}`).ReplaceAllString(str(v), "stand-in")
	}
	return env
}

// hostPort splits "host:port" and returns the port as a number.
func hostPort(t *testing.T, hp string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		t.Fatalf("%q: %v", hp, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: %v", hp, err)
	}
	return h, n
}

// exgateConfigPath returns the -config FILE of a compose service.
func exgateConfigPath(t *testing.T, svc any) string {
	t.Helper()
	cmd := list(dig(svc, "command"))
	i := slices.IndexFunc(cmd, func(v any) bool { return str(v) == "-config" })
	if i < 0 || i+1 >= len(cmd) {
		t.Fatalf("command %v has no -config FILE", cmd)
	}
	return str(cmd[i+1])
}

func TestCompose(t *testing.T) {
	docs := yamlDocs(t, "compose.yaml")
	if len(docs) != 1 {
		t.Fatalf("%d documents in compose.yaml, want 1", len(docs))
	}
	services, _ := dig(docs[0], "services").(map[string]any)
	for _, want := range []string{"exgate", "redis", "exchange-sim", "prometheus", "grafana"} {
		if services[want] == nil {
			t.Errorf("no service %s", want)
		}
	}

	c := composeFile{doc: docs[0], services: services, mounted: composeMounts(t, docs[0], services), env: composeEnv(t)}
	t.Run("exgate", func(t *testing.T) { checkComposeExgate(t, c) })

	t.Run("balancer", func(t *testing.T) { checkComposeBalancer(t, c) })

	t.Run("exchange-sim", func(t *testing.T) { checkComposeExchangeSim(t, c) })

	t.Run("prometheus", func(t *testing.T) { checkComposePrometheus(t, c) })

	t.Run("grafana", func(t *testing.T) { checkComposeGrafana(t, c) })
}

// composeFile is compose.yaml as TestCompose's checks read it.
type composeFile struct {
	doc      any
	services map[string]any
	// mounted maps each service's container paths to their bind mount
	// sources (see composeMounts).
	mounted map[string]map[string]string
	env     map[string]string // exgate's environment (see composeEnv)
}

// composeMounts checks that every bind mount's source and every build
// context exists, and that every named volume is declared. It returns where
// files land: for each service, its container paths and their sources.
func composeMounts(t *testing.T, doc any, services map[string]any) map[string]map[string]string {
	t.Helper()
	mounted := map[string]map[string]string{} // service → container path → source
	for name, svc := range services {
		mounted[name] = map[string]string{}
		for _, v := range list(dig(svc, "volumes")) {
			parts := strings.Split(str(v), ":")
			if len(parts) < 2 {
				t.Errorf("%s: volume %q", name, str(v))
				continue
			}
			src, dst := parts[0], parts[1]
			if !strings.HasPrefix(src, ".") {
				if dig(doc, "volumes", src) == nil && !slices.Contains(keys(dig(doc, "volumes")), src) {
					t.Errorf("%s: named volume %s is not declared", name, src)
				}
				continue
			}
			if !exists(src) {
				t.Errorf("%s: bind mount source %s does not exist", name, src)
			}
			mounted[name][dst] = src
		}
		if b := dig(svc, "build"); b != nil {
			ctx := str(dig(b, "context"))
			if !exists(filepath.Join(ctx, "go.mod")) || !exists(filepath.Join(ctx, str(dig(b, "dockerfile")))) {
				t.Errorf("%s: build context %q / dockerfile %q do not exist", name, ctx, str(dig(b, "dockerfile")))
			}
		}
	}

	return mounted
}

// checkComposeExgate checks exgate's service: its secrets come from the environment, its configuration loads and names the compose services, and its ports, grace period and hardening fit.
func checkComposeExgate(t *testing.T, c composeFile) {
	services, mounted, env, exgate := c.services, c.mounted, c.env, c.services["exgate"]
	if env["EXGATE_ADMIN_LISTEN"] != "0.0.0.0:9090" {
		t.Errorf("EXGATE_ADMIN_LISTEN = %q, want 0.0.0.0:9090 (Prometheus scrapes it)", env["EXGATE_ADMIN_LISTEN"])
	}
	// Secrets come from the environment compose runs in, never a
	// literal: the key secret required, the admin token (the console's,
	// on the container's every interface) passed on.
	if raw := str(dig(exgate, "environment", "EXGATE_KEY_SECRET")); !strings.HasPrefix(raw, "${EXGATE_KEY_SECRET:?") {
		t.Errorf("EXGATE_KEY_SECRET = %q: want it required from the environment, never a literal", raw)
	}
	if raw := str(dig(exgate, "environment", "EXGATE_ADMIN_TOKEN")); !strings.HasPrefix(raw, "${EXGATE_ADMIN_TOKEN") {
		t.Errorf("EXGATE_ADMIN_TOKEN = %q: want it from the environment, never a literal", raw)
	}
	cfgPath := exgateConfigPath(t, exgate)
	src, ok := mounted["exgate"][cfgPath]
	if !ok {
		t.Fatalf("-config %s is not mounted", cfgPath)
	}
	cfg, err := config.Load(src, envFunc(env))
	if err != nil {
		t.Fatalf("%s with compose's environment: %v", src, err)
	}
	if cfg.TokensFile != "" {
		tf := tokensPath(cfg.TokensFile, cfgPath)
		if src, ok := mounted["exgate"][tf]; !ok {
			t.Errorf("tokens_file %s (%s) is not mounted", cfg.TokensFile, tf)
		} else {
			checkTokensFile(t, src, readFile(t, src), cfg)
		}
	}
	_, admin := hostPort(t, cfg.AdminListen)
	_, traffic := hostPort(t, cfg.Listen)
	var published []string
	for _, p := range list(dig(exgate, "ports")) {
		published = append(published, str(p))
	}
	for _, port := range []int{traffic, admin} {
		if !slices.ContainsFunc(published, func(p string) bool { return strings.HasSuffix(p, ":"+strconv.Itoa(port)) }) {
			t.Errorf("port %d is not published (%v)", port, published)
		}
	}
	// The upstream and Redis are the compose services.
	up, _ := url.Parse(cfg.Upstream.URL.String())
	if up.Hostname() != "exchange-sim" {
		t.Errorf("upstream.url %s is not the exchange-sim service", up)
	}
	simCmd := list(dig(services["exchange-sim"], "command"))
	if j := slices.IndexFunc(simCmd, func(v any) bool { return str(v) == "-listen" }); j < 0 || j+1 >= len(simCmd) {
		t.Errorf("exchange-sim command %v has no -listen", simCmd)
	} else if _, p := hostPort(t, str(simCmd[j+1])); strconv.Itoa(p) != up.Port() {
		t.Errorf("exchange-sim listens on %d, upstream.url says %s", p, up.Port())
	}
	if len(cfg.Limiter.Redis.Addrs) != 1 {
		t.Fatalf("redis addrs %v, want the one compose service", cfg.Limiter.Redis.Addrs)
	}
	if h, _ := hostPort(t, cfg.Limiter.Redis.Addrs[0]); h != "redis" {
		t.Errorf("redis addr %s is not the redis service", cfg.Limiter.Redis.Addrs[0])
	}
	if cfg.Limiter.Replicas != 1 {
		t.Errorf("limiter.replicas = %d under compose's single gateway, want 1", cfg.Limiter.Replicas)
	}
	grace, err := time.ParseDuration(str(dig(exgate, "stop_grace_period")))
	if err != nil {
		t.Fatalf("stop_grace_period: %v", err)
	}
	if need := cfg.Server.DrainDelay + cfg.Server.ShutdownTimeout; grace <= need {
		t.Errorf("stop_grace_period %s ≤ drain_delay + shutdown_timeout = %s", grace, need)
	}
	if dig(exgate, "read_only") != true || !slices.Contains(list(dig(exgate, "cap_drop")), any("ALL")) {
		t.Error("exgate is not read_only with cap_drop ALL")
	}
}

// checkComposeBalancer checks the HAProxy balancer: exgate trusts its fixed address for PROXY v2, and it checks exgate's readiness over HTTP.
func checkComposeBalancer(t *testing.T, c composeFile) {
	doc, services, mounted, env, exgate := c.doc, c.services, c.mounted, c.env, c.services["exgate"]
	cfg, err := config.Load(mounted["exgate"][exgateConfigPath(t, exgate)], envFunc(env))
	if err != nil {
		t.Fatal(err)
	}
	bal := services["balancer"]
	if bal == nil {
		t.Fatal("no balancer service")
	}
	ip, err := netip.ParseAddr(str(dig(bal, "networks", "default", "ipv4_address")))
	if err != nil {
		t.Fatalf("the balancer has no fixed address: %v", err)
	}
	trusted := false
	for _, p := range cfg.Server.ProxyProtocol.TrustedPeers {
		trusted = trusted || p.Contains(ip)
	}
	if !trusted || len(cfg.Server.ProxyProtocol.TrustedPeers) != 1 || cfg.Server.ProxyProtocol.TrustedPeers[0].Bits() != 32 {
		t.Errorf("trusted_peers %v: want exactly the balancer %s", cfg.Server.ProxyProtocol.TrustedPeers, ip)
	}
	subnet := str(dig(list(dig(doc, "networks", "default", "ipam", "config"))[0], "subnet"))
	if pfx, err := netip.ParsePrefix(subnet); err != nil || !pfx.Contains(ip) {
		t.Errorf("the balancer's address %s is not in the network's subnet %q", ip, subnet)
	}
	var hcfg string
	for dst, src := range mounted["balancer"] {
		if strings.HasSuffix(dst, "haproxy.cfg") {
			hcfg = readFile(t, src)
		}
	}
	_, port := hostPort(t, cfg.Listen)
	_, adminPort := hostPort(t, cfg.AdminListen)
	if !strings.Contains(hcfg, fmt.Sprintf("server exgate exgate:%d send-proxy-v2 check port %d", port, adminPort)) {
		t.Errorf("haproxy.cfg does not send PROXY v2 to exgate:%d and check its admin port %d", port, adminPort)
	}
	// Readiness over HTTP: exgate's own /readyz, not a TCP connect
	// (which a wedged or draining process still accepts).
	if !strings.Contains(hcfg, "option httpchk") || !strings.Contains(hcfg, "uri /readyz") || !strings.Contains(hcfg, "expect status 200") {
		t.Errorf("haproxy.cfg does not check exgate's /readyz over HTTP:\n%s", hcfg)
	}
	if haproxy, err := exec.LookPath("haproxy"); err == nil {
		if out, err := exec.Command(haproxy, "-c", "-f", "haproxy/haproxy.cfg").CombinedOutput(); err != nil {
			t.Errorf("haproxy -c: %v\n%s", err, out)
		}
	}
}

// checkComposeExchangeSim checks that exchange-sim runs from the exgate image, where the Dockerfile puts binaries.
func checkComposeExchangeSim(t *testing.T, c composeFile) {
	services, exgate := c.services, c.services["exgate"]
	ep := list(dig(services["exchange-sim"], "entrypoint"))
	if len(ep) != 1 || path.Base(str(ep[0])) != "exchange-sim" {
		t.Fatalf("entrypoint %v", ep)
	}
	if !strings.Contains(readFile(t, "Dockerfile"), "/usr/local/bin/") || path.Dir(str(ep[0])) != "/usr/local/bin" {
		t.Errorf("entrypoint %s is not where the Dockerfile puts binaries", ep[0])
	}
	if str(dig(services["exchange-sim"], "image")) != str(dig(exgate, "image")) {
		t.Error("exchange-sim does not run the exgate image")
	}
}

// checkComposePrometheus checks that Prometheus gets its configuration and rule files mounted and scrapes exgate's admin listener.
func checkComposePrometheus(t *testing.T, c composeFile) {
	services, mounted, env := c.services, c.mounted, c.env
	p := services["prometheus"]
	var cfgFile string
	for _, a := range list(dig(p, "command")) {
		if v, ok := strings.CutPrefix(str(a), "--config.file="); ok {
			cfgFile = v
		}
	}
	src, ok := mounted["prometheus"][cfgFile]
	if !ok || src != "./prometheus/prometheus.yaml" {
		t.Fatalf("--config.file=%s is mounted from %q, want ./prometheus/prometheus.yaml", cfgFile, src)
	}
	var pc struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "prometheus/prometheus.yaml")), &pc); err != nil {
		t.Fatal(err)
	}
	for _, rf := range pc.RuleFiles {
		if _, ok := mounted["prometheus"][path.Join(path.Dir(cfgFile), rf)]; !ok {
			t.Errorf("rule file %s is not mounted next to %s", rf, cfgFile)
		}
	}
	cfg, err := config.Load("examples/exgate.yaml", envFunc(env))
	if err != nil {
		t.Fatal(err)
	}
	_, admin := hostPort(t, cfg.AdminListen)
	found := false
	for _, sc := range pc.ScrapeConfigs {
		if sc.JobName != "exgate" {
			continue
		}
		found = true
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("metrics_path %s", sc.MetricsPath)
		}
		for _, tg := range sc.StaticConfigs[0].Targets {
			if h, p := hostPort(t, tg); h != "exgate" || p != admin {
				t.Errorf("target %s, want exgate:%d (the admin listener)", tg, admin)
			}
			if h, _ := hostPort(t, tg); !slices.Contains(cfg.Admin.AllowedHosts, h) {
				t.Errorf("target %s: the admin listener answers Host %s only when admin.allowed_hosts lists it (%v)", tg, h, cfg.Admin.AllowedHosts)
			}
		}
	}
	if !found {
		t.Error(`no scrape job "exgate" (the alert rules select job="exgate")`)
	}
}

// checkComposeGrafana checks that Grafana's provisioning and the dashboard are mounted where its providers look.
func checkComposeGrafana(t *testing.T, c composeFile) {
	mounted := c.mounted
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "grafana/provisioning/dashboards/exgate.yaml")), &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Providers) != 1 {
		t.Fatalf("%d dashboard providers, want 1", len(prov.Providers))
	}
	dir := prov.Providers[0].Options.Path
	src, ok := mounted["grafana"][path.Join(dir, "exgate-dashboard.json")]
	if !ok || src != "./grafana/exgate-dashboard.json" {
		t.Errorf("the dashboard is not mounted into the provider's path %s", dir)
	}
	for _, d := range []string{"/etc/grafana/provisioning/datasources", "/etc/grafana/provisioning/dashboards"} {
		if _, ok := mounted["grafana"][d]; !ok {
			t.Errorf("%s is not mounted", d)
		}
	}
	var ds struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "grafana/provisioning/datasources/prometheus.yaml")), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("datasources %+v, want the prometheus service", ds.Datasources)
	}
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestOperationsDoc checks that docs/operations.md covers what the deploy
// files rely on.
func TestOperationsDoc(t *testing.T) {
	doc := readFile(t, "../docs/operations.md")
	for _, n := range exportedNames(t) {
		if strings.HasPrefix(n, "exgate_") && !strings.Contains(doc, "`"+n+"`") {
			t.Errorf("docs/operations.md does not describe %s", n)
		}
	}
	for _, want := range []string{
		"exgate-secrets", "key-secret", "redis-password", "EXGATE_ADMIN_LISTEN=0.0.0.0:9090",
		"docker compose -f deploy/compose.yaml", "kubectl apply -k deploy/kubernetes",
		"master_name", "limiter.replicas", "drain_delay", "shutdown_timeout", "terminationGracePeriodSeconds",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/operations.md does not mention %q", want)
		}
	}
}

func exportedNames(t *testing.T) []string {
	t.Helper()
	var out []string
	for n := range exported(t) {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
