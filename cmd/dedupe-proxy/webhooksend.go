package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

const webhookHelp = `
send posts one correctly signed test event to a webhook source, the way
the provider would (stripe trigger, svix's test send), so a config can be
tried without the provider. --secret is env:VARIABLE, file:PATH or the
secret itself; --body a file (- for stdin), by default a small event in
the profile's shape whose id is --id (default evt_test_<random>). It
prints the answer and exits 0 on a 2xx, 1 otherwise; a redirect (3xx) is
never followed, since it would carry the signed request elsewhere: send
names its Location and exits 1. generic-hmac takes
the --generic-* flags, as the source's webhook.generic block.

  dedupe-proxy webhook send --profile stripe --secret env:STRIPE_WEBHOOK_SECRET --url http://127.0.0.1:8443/hooks/stripe
`

func webhookCommand() *cobra.Command {
	g := group("webhook send --profile P --secret S --url URL", webhookHelp, "`webhook send`")
	send := &cobra.Command{
		Use:  "send --profile P --secret S --url URL [--id ID] [--body FILE]",
		Long: webhookHelp,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f := c.Flags()
			profile, _ := f.GetString("profile")
			secretRef, _ := f.GetString("secret")
			url, _ := f.GetString("url")
			id, _ := f.GetString("id")
			bodyFile, _ := f.GetString("body")
			var g webhook.Generic
			g.Header, _ = f.GetString("generic-header")
			g.Prefix, _ = f.GetString("generic-prefix")
			g.Encoding, _ = f.GetString("generic-encoding")
			g.Algorithm, _ = f.GetString("generic-algorithm")
			g.TimestampHeader, _ = f.GetString("generic-timestamp-header")
			if profile == "" || url == "" || (secretRef == "" && profile != webhook.ProfileNone) {
				return usagef(c, "webhook send: --profile, --url and --secret are required")
			}
			secret, err := readSecret(secretRef)
			if err != nil {
				return usagef(c, "webhook send: --secret: %v", err)
			}
			if id == "" {
				b := make([]byte, 6)
				_, _ = rand.Read(b)
				id = "evt_test_" + hex.EncodeToString(b)
			}
			body := webhook.SampleEvent(profile, id)
			if bodyFile != "" {
				if body, err = readBody(bodyFile, c.InOrStdin()); err != nil {
					return usagef(c, "webhook send: --body: %v", err)
				}
			}
			h, err := webhook.Sign(profile, secret, g, body, id, time.Now())
			if err != nil {
				return usagef(c, "webhook send: %v", err)
			}
			return sendWebhook(url, h, body, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	f := send.Flags()
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
	g.AddCommand(send)
	return g
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
