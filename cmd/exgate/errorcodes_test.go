package main

import (
	"go/ast"
	"go/token"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/exgate/exgate/internal/doctext"
)

// errorCode is one answer exgate can give a client itself: an HTTP status
// and the stable code of its body.
type errorCode struct {
	status int
	code   string
}

// statusByName maps net/http's status constant names (StatusBadRequest)
// to their values, from the statuses' reason phrases.
func statusByName() map[string]int {
	m := map[string]int{}
	for code := 100; code < 600; code++ {
		text := http.StatusText(code)
		if text == "" {
			continue
		}
		name := strings.Map(func(r rune) rune {
			if unicode.IsLetter(r) || unicode.IsDigit(r) {
				return r
			}
			return -1
		}, strings.Title(text)) //nolint:staticcheck // ASCII reason phrases
		m["Status"+name] = code
	}
	m["StatusRequestURITooLong"] = http.StatusRequestURITooLong
	m["StatusNonAuthoritativeInfo"] = http.StatusNonAuthoritativeInfo
	return m
}

// producedErrorCodes returns every (status, code) pair the gateway's
// source builds an *apierror.Error with — apierror.New, apierror.Static
// or an apierror.Error literal — where both are constants. sim (the
// reference exchange) and tests are not the gateway and are skipped.
func producedErrorCodes(t *testing.T) map[errorCode]bool {
	t.Helper()
	var files []*ast.File
	for _, f := range moduleFiles(t) {
		if !f.test && f.dir != "sim" && !strings.HasPrefix(f.dir, "sim/") {
			files = append(files, f.file)
		}
	}
	consts := stringConstants(files)
	statuses := statusByName()
	status := func(e ast.Expr) (int, bool) {
		if s, ok := e.(*ast.SelectorExpr); ok {
			if x, ok := s.X.(*ast.Ident); ok && x.Name == "http" {
				v, ok := statuses[s.Sel.Name]
				if !ok {
					t.Errorf("unknown status constant http.%s", s.Sel.Name)
				}
				return v, ok
			}
		}
		return 0, false
	}
	code := func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				s, err := strconv.Unquote(e.Value)
				return s, err == nil
			}
		case *ast.Ident:
			s, ok := consts[e.Name]
			return s, ok
		case *ast.SelectorExpr:
			s, ok := consts[e.Sel.Name]
			return s, ok
		}
		return "", false
	}
	out := map[errorCode]bool{}
	add := func(se, ce ast.Expr) {
		s, ok1 := status(se)
		c, ok2 := code(ce)
		if ok1 && ok2 {
			out[errorCode{s, c}] = true
		}
	}
	for _, f := range files {
		inApierror := f.Name.Name == "apierror"
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				var fn string
				switch f := n.Fun.(type) {
				case *ast.SelectorExpr:
					if x, ok := f.X.(*ast.Ident); ok && x.Name == "apierror" {
						fn = f.Sel.Name
					}
				case *ast.Ident:
					if inApierror {
						fn = f.Name
					}
				}
				if (fn == "New" || fn == "Static") && len(n.Args) >= 2 {
					add(n.Args[0], n.Args[1])
				}
			case *ast.CompositeLit:
				s, ok := n.Type.(*ast.SelectorExpr)
				if !ok || s.Sel.Name != "Error" {
					return true
				}
				if x, ok := s.X.(*ast.Ident); !ok || x.Name != "apierror" {
					return true
				}
				var se, ce ast.Expr
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						switch kv.Key.(*ast.Ident).Name {
						case "Status":
							se = kv.Value
						case "Code":
							ce = kv.Value
						}
					}
				}
				if se != nil && ce != nil {
					add(se, ce)
				}
			}
			return true
		})
	}
	return out
}

// stringConstants returns the string constants of files by name
// (CodeInvalidOrder, CodeTooLarge…): the codes are named once and used
// across packages. A constant defined as another constant
// (validate.CodeTooLarge = apierror.CodeTooLarge) has that one's value.
func stringConstants(files []*ast.File) map[string]string {
	consts := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	// Constants defined as other constants (validate.CodeTooLarge =
	// apierror.CodeTooLarge).
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := vs.Values[i].(*ast.SelectorExpr); ok {
							if v, ok := consts[s.Sel.Name]; ok {
								consts[name.Name] = v
							}
						}
					}
				}
			}
			return true
		})
	}
	return consts
}

// errorTableRow is a row of an error table: "| 400 | `invalid_path` | …".
var errorTableRow = regexp.MustCompile("(?m)^\\| (\\d{3}) \\| `([a-z_]+)`")

// statusAndCode is a status followed by an error code in running text:
// "400 `invalid_header`", "→ 401 token_not_valid", "409 request_in_progress".
var statusAndCode = regexp.MustCompile("\\b([1-5]\\d\\d) `?([a-z]+(?:_[a-z]+)+)\\b")

// TestDocumentedErrorCodes keeps the docs' error codes true: every row of
// docs/architecture.md's error table is an answer the code gives, every
// answer the code gives is a row there, and wherever README.md or a page
// of docs/ writes a status followed by an error code, the code gives that
// answer with that status.
func TestDocumentedErrorCodes(t *testing.T) {
	produced := producedErrorCodes(t)
	if len(produced) < 30 {
		t.Fatalf("found %d error codes in the source, want at least 30: the search is broken", len(produced))
	}
	codes := map[string]bool{}
	for ec := range produced {
		codes[ec.code] = true
	}
	// The admin listener's answers (the console's, its Host and token
	// checks: docs/operations.md) and the pipeline's internal "answered"
	// marker are not traffic answers.
	console := map[string]bool{"reset_disabled": true, "invalid_subject": true, "unknown_subject": true,
		"admin_token_required": true, "host_not_allowed": true, "cross_site_refused": true}

	arch, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	table := map[errorCode]bool{}
	for _, m := range errorTableRow.FindAllStringSubmatch(string(arch), -1) {
		s, _ := strconv.Atoi(m[1])
		ec := errorCode{s, m[2]}
		table[ec] = true
		if !produced[ec] {
			t.Errorf("docs/architecture.md lists %d %s; exgate never answers it", s, m[2])
		}
	}
	for ec := range produced {
		if !table[ec] && !console[ec.code] && ec.code != "answered" {
			t.Errorf("exgate answers %d %s; docs/architecture.md's error table does not list it", ec.status, ec.code)
		}
	}

	checked := 0
	for _, d := range doctext.Docs(t, "../..") {
		for _, m := range statusAndCode.FindAllStringSubmatch(d.Text, -1) {
			if !codes[m[2]] {
				continue // "503 on_store_error: closed" is a status and a setting
			}
			s, _ := strconv.Atoi(m[1])
			checked++
			if !produced[errorCode{s, m[2]}] {
				var with []string
				for ec := range produced {
					if ec.code == m[2] {
						with = append(with, strconv.Itoa(ec.status))
					}
				}
				slices.Sort(with)
				t.Errorf("%s: %q; exgate answers %s with %s", d.Name, m[0], m[2], strings.Join(with, ", "))
			}
		}
	}
	if checked < 20 {
		t.Errorf("found %d status-and-code mentions in the docs, want at least 20", checked)
	}
}
