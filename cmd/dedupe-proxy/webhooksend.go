package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

const webhookHelp = `
send posts one correctly signed test event to a webhook source, the way
the provider would (stripe trigger, svix's test send), so a config can be
tried without the provider.

With --config FILE --source NAME it takes the source's profile, the
first of its secrets that can be read, its generic block and its URL
(http:// + listen + path; a wildcard listen address is reached on
127.0.0.1); a flag given as well overrides that one value. --source may be left out when the config has
one webhook source. Without --config, --profile, --url and --secret are
required: --secret is env:VARIABLE, file:PATH or the secret itself, and
generic-hmac takes the --generic-* flags, as the source's webhook.generic
block.

--body sends a file (- for stdin); by default a small event in the
profile's shape whose id is --id (default evt_test_<random>). It prints
the answer and exits 0 on a 2xx, 1 otherwise; a redirect (3xx) is never
followed, since it would carry the signed request elsewhere: send names
its Location and exits 1.

  dedupe-proxy webhook send --config config.yaml --source stripe
  dedupe-proxy webhook send --profile stripe --secret env:STRIPE_WEBHOOK_SECRET --url http://127.0.0.1:8443/hooks/stripe
`

// sendTarget is what webhook send signs with and where it posts.
type sendTarget struct {
	profile, secret, url string
	generic              webhook.Generic
}

func webhookCommand() *cobra.Command {
	g := group("webhook send --profile P --secret S --url URL", webhookHelp, "`webhook send`")
	send := &cobra.Command{
		Use:  "send (--config FILE [--source NAME] | --profile P --secret S --url URL) [--id ID] [--body FILE]",
		Long: webhookHelp,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f := c.Flags()
			var tg sendTarget
			if f.Changed("config") || f.Changed("source") {
				var err error
				if tg, err = sourceTarget(c); err != nil {
					return err
				}
			} else {
				tg.generic.Encoding, _ = f.GetString("generic-encoding")
				tg.generic.Algorithm, _ = f.GetString("generic-algorithm")
			}
			str := func(name string, into *string) {
				if f.Changed(name) {
					*into, _ = f.GetString(name)
				}
			}
			str("profile", &tg.profile)
			str("url", &tg.url)
			str("generic-header", &tg.generic.Header)
			str("generic-prefix", &tg.generic.Prefix)
			str("generic-encoding", &tg.generic.Encoding)
			str("generic-algorithm", &tg.generic.Algorithm)
			str("generic-timestamp-header", &tg.generic.TimestampHeader)
			if f.Changed("secret") {
				ref, _ := f.GetString("secret")
				secret, err := readSecret(ref)
				if err != nil {
					return usagef(c, "webhook send: --secret: %v", err)
				}
				tg.secret = secret
			}
			if tg.profile == "" || tg.url == "" || (tg.secret == "" && tg.profile != webhook.ProfileNone) {
				return usagef(c, "webhook send: --profile, --url and --secret are required (or --config FILE --source NAME)")
			}
			id, _ := f.GetString("id")
			bodyFile, _ := f.GetString("body")
			if id == "" {
				b := make([]byte, 6)
				_, _ = rand.Read(b)
				id = "evt_test_" + hex.EncodeToString(b)
			}
			body := webhook.SampleEvent(tg.profile, id)
			if bodyFile != "" {
				var err error
				if body, err = readBody(bodyFile, c.InOrStdin()); err != nil {
					return usagef(c, "webhook send: --body: %v", err)
				}
			}
			h, err := webhook.Sign(tg.profile, tg.secret, tg.generic, body, id, time.Now())
			if err != nil {
				return usagef(c, "webhook send: %v", err)
			}
			return sendWebhook(tg.url, h, body, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	f := send.Flags()
	addConfigFlag(f)
	f.String("source", "", "the webhook source `NAME` in --config whose profile, secret and URL to use")
	f.String("profile", "", "the sender's `PROFILE`: "+strings.Join(webhook.Profiles(), ", "))
	f.String("secret", "", "the signing secret: env:`VARIABLE`, file:PATH, or the secret itself")
	f.String("url", "", "the webhook source's `URL` (its listen address and path)")
	f.String("id", "", "the event `ID` (default evt_test_<random>)")
	f.String("body", "", "send this `FILE` (- for stdin) instead of a sample event")
	f.String("generic-header", "", "generic-hmac: the signature `HEADER`")
	f.String("generic-prefix", "", "generic-hmac: the signature's `PREFIX`")
	f.String("generic-encoding", "hex", "generic-hmac: hex or base64")
	f.String("generic-algorithm", "sha256", "generic-hmac: sha256, sha512 or sha1")
	f.String("generic-timestamp-header", "", "generic-hmac: the signed timestamp `HEADER`, if any")
	_ = send.RegisterFlagCompletionFunc("profile", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return webhook.Profiles(), cobra.ShellCompDirectiveNoFileComp
	})
	_ = send.RegisterFlagCompletionFunc("source", func(c *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		cfg, _, _, err := loadConfig(c)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return webhookSources(cfg), cobra.ShellCompDirectiveNoFileComp
	})
	g.AddCommand(send)
	return g
}

func webhookSources(cfg *config.Config) []string {
	var names []string
	for _, s := range cfg.Sources {
		if s.Type == "webhook" {
			names = append(names, s.Name)
		}
	}
	return names
}

// sourceTarget reads --config and picks the webhook source --source
// names (or the only one): its profile, first readable secret, generic
// block and URL.
func sourceTarget(c *cobra.Command) (sendTarget, error) {
	cfg, _, _, err := loadConfig(c)
	if err != nil {
		return sendTarget{}, err
	}
	name, _ := c.Flags().GetString("source")
	hooks := webhookSources(cfg)
	if name == "" {
		if len(hooks) != 1 {
			return sendTarget{}, usagef(c, "webhook send: --source NAME is required: the config has %d webhook sources %v", len(hooks), hooks)
		}
		name = hooks[0]
	}
	var src *config.Source
	for i := range cfg.Sources {
		if cfg.Sources[i].Name == name {
			src = &cfg.Sources[i]
		}
	}
	switch {
	case src == nil:
		return sendTarget{}, usagef(c, "webhook send: no source %q in the config; its webhook sources: %v", name, hooks)
	case src.Type != "webhook":
		return sendTarget{}, usagef(c, "webhook send: source %q is of type %s, not webhook; its webhook sources: %v", name, src.Type, hooks)
	}
	w := src.Webhook
	tg := sendTarget{profile: w.Profile, url: "http://" + dialable(w.Listen) + w.Path,
		generic: webhook.Generic{Header: w.Generic.Header, Prefix: w.Generic.Prefix, Encoding: w.Generic.Encoding,
			Algorithm: w.Generic.Algorithm, TimestampHeader: w.Generic.TimestampHeader}}
	if w.Profile != webhook.ProfileNone && !c.Flags().Changed("secret") {
		// Any of the source's secrets verifies; one that cannot be read
		// (an old one already removed) does not stop the others.
		secrets, errs := w.ResolveSecrets(os.LookupEnv)
		if len(secrets) == 0 {
			fmt.Fprintf(c.ErrOrStderr(), "webhook send: source %s: its secret cannot be read: %v\n", name, errors.Join(errs...))
			return sendTarget{}, exitCode(1)
		}
		tg.secret = secrets[0]
	}
	return tg, nil
}

// dialable turns a listen address into one to connect to: a wildcard
// host (":8443", "0.0.0.0:8443", "[::]:8443") is reached on loopback.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func readSecret(ref string) (string, error) {
	if name, ok := strings.CutPrefix(ref, "env:"); ok {
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return "", fmt.Errorf("variable %s is not set", name)
		}
		return v, nil
	}
	if path, ok := strings.CutPrefix(ref, "file:"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	return ref, nil
}

func readBody(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

func sendWebhook(url string, h http.Header, body []byte, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(stderr, "webhook send: %v\n", err)
		return exitCode(1)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dedupe-proxy-webhook-send")
	// A provider posts once and never follows a redirect; following one
	// would carry the signature headers and body to whatever origin the
	// Location names and report that origin's answer as the source's.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "webhook send: %v\n", err)
		return exitCode(1)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	fmt.Fprintf(stdout, "%s %s\n", resp.Proto, resp.Status)
	if a := strings.TrimSpace(string(answer)); a != "" {
		fmt.Fprintln(stdout, a)
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		loc := resp.Header.Get("Location")
		if loc == "" {
			loc = "(no Location header)"
		}
		fmt.Fprintf(stderr, "webhook send: %s answered %s, a redirect to %s; not followed: point --url at the webhook source itself\n",
			url, resp.Status, loc)
		return exitCode(1)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return exitCode(1)
	}
	return nil
}
