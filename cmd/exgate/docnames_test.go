package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/internal/doctext"
)

// moduleFile is one parsed Go file of the module.
type moduleFile struct {
	dir  string // its package's directory below the module root: "proxy", "internal/expiring"
	test bool   // a _test.go file
	file *ast.File
}

var (
	moduleOnce   sync.Once
	moduleParsed []moduleFile
	moduleErr    error
)

// moduleFiles returns every Go file of the module, parsed once per test
// binary.
func moduleFiles(t *testing.T) []moduleFile {
	t.Helper()
	moduleOnce.Do(func() {
		root := "../.."
		fset := token.NewFileSet()
		moduleErr = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			moduleParsed = append(moduleParsed, moduleFile{dir: filepath.ToSlash(rel), test: strings.HasSuffix(p, "_test.go"), file: f})
			return nil
		})
	})
	if moduleErr != nil {
		t.Fatal(moduleErr)
	}
	return moduleParsed
}

// moduleNames is what the module declares, for checking names in the docs.
type moduleNames struct {
	pkgDecls map[string]map[string]bool // package name → its package-level names
	members  map[string]map[string]bool // type name → its methods and fields (any package)
	tests    []string                   // Test, Benchmark and Fuzz functions
}

// declared reports whether name is declared anywhere in the module: at
// package level, or as a method or field.
func (n moduleNames) declared(name string) bool {
	for _, d := range n.pkgDecls {
		if d[name] {
			return true
		}
	}
	for _, m := range n.members {
		if m[name] {
			return true
		}
	}
	return false
}

func collectNames(t *testing.T) moduleNames {
	n := moduleNames{pkgDecls: map[string]map[string]bool{}, members: map[string]map[string]bool{}}
	member := func(typ, name string) {
		if n.members[typ] == nil {
			n.members[typ] = map[string]bool{}
		}
		n.members[typ][name] = true
	}
	for _, mf := range moduleFiles(t) {
		pkg := mf.file.Name.Name
		if n.pkgDecls[pkg] == nil {
			n.pkgDecls[pkg] = map[string]bool{}
		}
		decls := n.pkgDecls[pkg]
		for _, d := range mf.file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					decls[d.Name.Name] = true
					if mf.test && (strings.HasPrefix(d.Name.Name, "Test") || strings.HasPrefix(d.Name.Name, "Benchmark") || strings.HasPrefix(d.Name.Name, "Fuzz")) {
						n.tests = append(n.tests, d.Name.Name)
					}
					continue
				}
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if g, ok := recv.(*ast.IndexExpr); ok {
					recv = g.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					member(id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						decls[s.Name.Name] = true
						member(s.Name.Name, "") // the type exists
						var fields *ast.FieldList
						switch tt := s.Type.(type) {
						case *ast.StructType:
							fields = tt.Fields
						case *ast.InterfaceType:
							fields = tt.Methods
						}
						if fields != nil {
							for _, f := range fields.List {
								for _, name := range f.Names {
									member(s.Name.Name, name.Name)
								}
								if len(f.Names) == 0 { // embedded: its name
									e := f.Type
									if st, ok := e.(*ast.StarExpr); ok {
										e = st.X
									}
									switch e := e.(type) {
									case *ast.Ident:
										member(s.Name.Name, e.Name)
									case *ast.SelectorExpr:
										member(s.Name.Name, e.Sel.Name)
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, name := range s.Names {
							decls[name.Name] = true
						}
					}
				}
			}
		}
	}
	return n
}

// configSectionKeys maps each top-level configuration key to the keys of
// its section (nil for a scalar or a list).
func configSectionKeys() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	ct := reflect.TypeOf(config.Config{})
	yamlName := func(f reflect.StructField) string {
		n, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		return n
	}
	for i := 0; i < ct.NumField(); i++ {
		f := ct.Field(i)
		name := yamlName(f)
		if name == "" || name == "-" {
			continue
		}
		var keys map[string]bool
		if f.Type.Kind() == reflect.Struct {
			keys = map[string]bool{}
			for j := 0; j < f.Type.NumField(); j++ {
				keys[yamlName(f.Type.Field(j))] = true
			}
		}
		out[name] = keys
	}
	return out
}

var (
	// docPath is a path in the repository: `proxy/pipeline.go`,
	// `deploy/kubernetes/`, `.ci/test-deps.sh`.
	docPath = regexp.MustCompile("(?:^|[\\s(`\"'])((?:apierror|bench|cmd|config|deploy|docs|fault|idempotency|identity|internal|limiter|metrics|overload|proxy|ratelimit|sim|topk|validate|\\.ci)/[A-Za-z0-9_./-]*[A-Za-z0-9_/])")
	// docTest is a test, benchmark or fuzz function's name.
	docTest = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)
	// docIdent is a qualified Go name in backticks: `proxy.WriteError`,
	// `Gateway.ServeHTTP`, `validate.Order.AppendCanonical`, `Enforcer.Refund()`.
	docIdent = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*)\\.([A-Za-z_][A-Za-z0-9_]*)(?:\\.([A-Za-z_][A-Za-z0-9_]*))?(?:\\(\\))?`")
	// docBareIdent is an unqualified Go name in backticks, in camel case
	// (`joinedClaim`, `WriteError`, `AllowAll()`): one that cannot be a
	// configuration key, a header or a command.
	docBareIdent = regexp.MustCompile("`([A-Za-z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)(?:\\(\\))?`")
	// diagramIdent is a qualified Go name in a diagram, not in
	// backticks: proxy.upstreamID, Gateway.proxyError.
	diagramIdent = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?\b`)
	// docFileIdent is a Go file followed by a name in it:
	// "`ratelimit/redis.go` `AllowN`".
	docFileIdent = regexp.MustCompile("`([a-z0-9_/]+\\.go)` `([A-Za-z_][A-Za-z0-9_]*)`")
	// goneWords say that what a passage names no longer exists.
	goneWords = regexp.MustCompile(`\b(?:removed|is gone|are gone|no longer exists?|replaced by)\b`)
)

// fileExtension holds the endings of file names the docs write in
// backticks, which docIdent would read as a qualified name.
var fileExtension = map[string]bool{"go": true, "md": true, "yaml": true, "yml": true, "json": true, "lua": true, "py": true, "sh": true, "png": true, "pgo": true}

// stdlibType holds standard-library type names the module also declares
// a type of: the docs' `Request.Clone` is net/http's.
var stdlibType = map[string]bool{"Request": true, "Response": true, "Header": true, "Transport": true, "Server": true, "Client": true, "Conn": true}

// semconvName holds OpenTelemetry attribute names the docs list that read
// as a member of a type the module declares: `client.address` is a span
// attribute, not a field of overload's client.
var semconvName = map[string]bool{"client.address": true}

// stdlibName holds camel-case names the docs use from outside the
// module: Go's standard library and runtime, go-redis, fasthttp,
// Kubernetes, Prometheus, the browser, Django REST framework, units and
// headers.
var stdlibName = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`
		ReverseProxy RoundTripper GetBody WithContext ReadResponse readMIMEHeader readLoop writeLoop
		finishRequest findRunnable SetXForwarded JoinHostPort
		DialerRetries PoolSize tryDial HostClient
		LoadBalancer syncFrequency subPath jobLabel sessionStorage DecimalField
		RateLimit KiB MiB GiB EdDSA NaN
		validateHeaders setDeadlineImpl propagateCancel WithCancelCause
		ModifyResponse SetReadDeadline SetWriteDeadline cancelCtx gcStart GotConn`) {
		stdlibName[n] = true
	}
}

// diagrams returns the spans of the fenced blocks of doc without a
// language (the request path's drawing), fences paired in order.
func diagrams(doc string) [][2]int {
	var out [][2]int
	open, plain, start := false, false, 0
	for i := 0; i < len(doc); {
		end := strings.IndexByte(doc[i:], '\n')
		if end < 0 {
			end = len(doc) - i
		}
		line := strings.TrimSpace(doc[i : i+end])
		if strings.HasPrefix(line, "```") {
			if !open {
				open, plain, start = true, line == "```", i+end+1
			} else {
				if plain {
					out = append(out, [2]int{start, i})
				}
				open = false
			}
		}
		i += end + 1
	}
	return out
}

// fileDeclares reports whether the Go file at path declares name at
// package level or as a method.
func fileDeclares(t *testing.T, path, name string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return false // a missing file is reported as a path
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name == name {
				return true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.Name == name {
						return true
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.Name == name {
							return true
						}
					}
				}
			}
		}
	}
	return false
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// mentionsGone reports whether the text around doc[start:end], within its
// paragraph and about two lines either side, says that what it names was
// removed.
func mentionsGone(doc string, start, end int) bool {
	return doctext.SaysGone(doc, start, end, goneWords)
}

// checkQualifiedNames checks the qualified names doc gives in backticks,
// and bare in its diagrams (fenced blocks without a language): each that
// names a package, type or member of this module must be declared, unless
// the text around it says it was removed. at gives an offset's file:line.
// It returns how many names it checked.
func checkQualifiedNames(t *testing.T, doc string, at func(int) string, names moduleNames, sections map[string]map[string]bool, prototypes string) (idents int) {
	t.Helper()
	qualified := docIdent.FindAllStringSubmatchIndex(doc, -1)
	for _, blk := range diagrams(doc) {
		for _, m := range diagramIdent.FindAllStringSubmatchIndex(doc[blk[0]:blk[1]], -1) {
			for i := range m {
				if m[i] >= 0 {
					m[i] += blk[0]
				}
			}
			qualified = append(qualified, m)
		}
	}
	for _, m := range qualified {
		a, b := doc[m[2]:m[3]], doc[m[4]:m[5]]
		c := ""
		if m[6] >= 0 {
			c = doc[m[6]:m[7]]
		}
		if fileExtension[b] || strings.Contains(b, "_") || stdlibType[a] || semconvName[a+"."+b] {
			continue // `app.go`, `fields.non_field_errors`, `Request.Clone`
		}
		var ok bool
		switch decls := names.pkgDecls[a]; {
		case decls != nil && a != "main":
			if keys, isSection := sections[a]; isSection && keys[b] {
				continue // `limiter.headers`: a configuration key, not Go
			}
			if unicode.IsLower(rune(b[0])) && sections[a] != nil {
				continue // `identity.users_file`-like keys are checked by config's docs test
			}
			ok = decls[b] && (c == "" || names.members[b][c])
		case names.members[a] != nil && unicode.IsLetter(rune(a[0])):
			ok = c == "" && names.members[a][b]
		default:
			continue // not a name of this module (`http.Transport`, `net.Conn`)
		}
		idents++
		if !ok && !strings.Contains(prototypes, " "+b+"(") && !mentionsGone(doc, m[0], m[1]) {
			t.Errorf("%s: %s is not declared in the module (say it was removed, or drop it)", at(m[0]), doc[m[0]:m[1]])
		}
	}
	return idents
}

// TestDocsNameOnlyWhatExists keeps the README and docs/ from citing code
// that is not there: every repository path they give exists, every test,
// benchmark or fuzz function they name is one (or, for a -bench pattern,
// starts one), every Go name in backticks — a package's name, a type's
// method or field, or a camel-case name of the module — is declared, and
// every alert named is a rule, unless the text around it says it was
// removed.
func TestDocsNameOnlyWhatExists(t *testing.T) {
	names := collectNames(t)
	sections := configSectionKeys()
	rules, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	alerts := string(rules)
	// The measured prototypes' diffs (docs/performance-history.md) declare names
	// of their own.
	diffs, err := filepath.Glob("../../bench/prototypes/*.diff")
	if err != nil {
		t.Fatal(err)
	}
	var prototypes string
	for _, d := range diffs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		prototypes += string(b)
	}
	var paths, tests, idents int
	for _, d := range doctext.Docs(t, "../..") {
		doc, base := d.Text, d.Name
		at := func(i int) string { return base + ":" + strconv.Itoa(strings.Count(doc[:i], "\n")+1) }

		for _, m := range docPath.FindAllStringSubmatchIndex(doc, -1) {
			p := strings.TrimSuffix(doc[m[2]:m[3]], ".")
			if strings.ContainsAny(p, "*") || strings.HasPrefix(p, "bench/results/") {
				continue // a pattern, or what make bench writes
			}
			if dir, rest, _ := strings.Cut(p, "/"); dir == "internal" {
				if sub, _, _ := strings.Cut(rest, "/"); !isDir(filepath.Join("../../internal", sub)) {
					continue // Go's own internal/runtime/…
				}
			}
			paths++
			if _, err := os.Stat(filepath.Join("../..", p)); err != nil && !mentionsGone(doc, m[2], m[3]) {
				t.Errorf("%s: %s does not exist (say it was removed, or drop it)", at(m[2]), p)
			}
		}
		for _, m := range docFileIdent.FindAllStringSubmatchIndex(doc, -1) {
			file, name := doc[m[2]:m[3]], doc[m[4]:m[5]]
			paths++
			if !fileDeclares(t, filepath.Join("../..", file), name) && !mentionsGone(doc, m[0], m[1]) {
				t.Errorf("%s: %s declares no %s (say where it lives now, or that it was removed)", at(m[0]), file, name)
			}
		}
		for _, m := range docTest.FindAllStringIndex(doc, -1) {
			name := doc[m[0]:m[1]]
			tests++
			found := false
			for _, tn := range names.tests {
				if strings.HasPrefix(tn, name) {
					found = true
					break
				}
			}
			if !found && !mentionsGone(doc, m[0], m[1]) {
				t.Errorf("%s: no test function %s", at(m[0]), name)
			}
		}
		for _, m := range docBareIdent.FindAllStringSubmatchIndex(doc, -1) {
			name := doc[m[2]:m[3]]
			if stdlibName[name] {
				continue
			}
			idents++
			if strings.HasPrefix(name, "Exgate") { // an alert
				if !strings.Contains(alerts, "alert: "+name+"\n") {
					t.Errorf("%s: %s is not an alert of deploy/prometheus/alerts.yaml", at(m[0]), name)
				}
				continue
			}
			if !names.declared(name) && !strings.Contains(prototypes, name) && !mentionsGone(doc, m[0], m[1]) {
				t.Errorf("%s: %s is declared nowhere in the module (say it was removed, or drop it)", at(m[0]), doc[m[0]:m[1]])
			}
		}
		idents += checkQualifiedNames(t, doc, at, names, sections, prototypes)
	}
	if paths < 50 || tests < 50 || idents < 100 {
		t.Errorf("checked %d paths, %d test names and %d Go names in the docs; the patterns no longer find them", paths, tests, idents)
	}
}
