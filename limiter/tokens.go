package limiter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxTokensFileSize is the largest tokens file accepted, in bytes.
const MaxTokensFileSize = 64 << 20

// ParseTokens reads a tokens file's document, data: a YAML mapping of
// token ids to tier names,
//
//	tokens:
//	  3f2a9c…(32 hex digits): vip
//
// Ids are what `exgate token-id` prints for a token under the key secret;
// raw tokens never appear in the file. Every tier must be one of tiers.
// All problems are reported at once, each with its line; name labels
// them. The file is read by the caller, within MaxTokensFileSize.
func ParseTokens(name string, data []byte, tiers []string) (map[string]string, error) {
	return parseTierFile(name, data, "tokens", "token id", tiers, func(k string) (string, string) {
		id := strings.ToLower(k)
		if !IsTokenID(id) {
			return "", fmt.Sprintf("%q is not a token id (32 hex digits, from `exgate token-id`)", short(k))
		}
		return id, ""
	})
}

// MaxUserLen is the longest user id a users file may name.
const MaxUserLen = 256

// ParseUsers reads a users file's document, data: a YAML mapping of user
// ids, as the verified tokens' user claim carries them, to tier names,
//
//	users:
//	  "42": vip
//	  alice: pro
//
// Every tier must be one of tiers. All problems are reported at once,
// each with its line; name labels them. The file is read by the caller,
// within MaxTokensFileSize.
func ParseUsers(name string, data []byte, tiers []string) (map[string]string, error) {
	return parseTierFile(name, data, "users", "user id", tiers, func(k string) (string, string) {
		if k == "" || len(k) > MaxUserLen {
			return "", fmt.Sprintf("%q is not a user id (1 to %d bytes, as the user claim carries it)", short(k), MaxUserLen)
		}
		return k, ""
	})
}

// parseTierFile reads a YAML document of one mapping, section, from keys
// (checked and normalised by key, which returns a problem or "") to
// tiers.
func parseTierFile(name string, data []byte, section, what string, tiers []string, key func(string) (string, string)) (map[string]string, error) {
	out := map[string]string{}
	if len(bytes.TrimSpace(data)) == 0 {
		return out, nil
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: one YAML document expected", name)
	}
	var problems []string
	bad := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping with a %q key", name, root.Line, section)
	}
	var entries *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != section {
			bad(k.Line, "unknown key %q; want %q", k.Value, section)
			continue
		}
		entries = v
	}
	if entries != nil && entries.Tag != "!!null" {
		if entries.Kind != yaml.MappingNode {
			bad(entries.Line, "%s: want a mapping of %s to tier", section, what)
		} else {
			for i := 0; i+1 < len(entries.Content); i += 2 {
				k, v := entries.Content[i], entries.Content[i+1]
				id, problem := key(k.Value)
				switch {
				case problem != "":
					bad(k.Line, "%s: %s", section, problem)
				case v.Kind != yaml.ScalarNode:
					bad(v.Line, "%s.%s: want a tier name", section, id)
				case !slices.Contains(tiers, v.Value):
					bad(v.Line, "%s.%s: unknown tier %q (tiers: %s)", section, id, short(v.Value), strings.Join(tiers, ", "))
				default:
					if _, dup := out[id]; dup {
						bad(k.Line, "%s.%s: listed twice", section, id)
					}
					out[id] = v.Value
				}
			}
		}
	}
	if len(problems) > 0 {
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("… and %d more", len(problems)-20))
		}
		return nil, errors.New(strings.Join(problems, "\n"))
	}
	return out, nil
}

// short cuts s for a message.
func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
