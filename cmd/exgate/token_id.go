package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/exgate/exgate/config"
	"github.com/exgate/exgate/limiter"
)

// tokenIDCommand implements `exgate token-id`: it prints, for each token
// read from stdin (one per line, "Bearer " allowed), its token id under
// the key secret named by the configuration.
func tokenIDCommand(args []string, getenv func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exgate token-id", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration `file` naming the key secret's variable")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: exgate token-id [-config FILE] < tokens (one per line)")
		return 2
	}
	cfg, err := config.Load(*configPath, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "exgate: configuration errors:\n%v\n", err)
		return 2
	}
	secret, _ := getenv(cfg.Limiter.KeySecretEnv)
	k, err := limiter.NewKeyer([]byte(secret))
	if err != nil {
		fmt.Fprintf(stderr, "exgate: %s: %v (set it to the secret the gateways use)\n", cfg.Limiter.KeySecretEnv, err)
		return 2
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		tok := strings.TrimSpace(sc.Text())
		tok = strings.TrimSpace(strings.TrimPrefix(tok, "Bearer "))
		if tok == "" {
			continue
		}
		fmt.Fprintln(stdout, k.ID(tok))
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(stderr, "exgate:", err)
		return 1
	}
	return 0
}
