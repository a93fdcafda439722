package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dedupe-proxy/dedupe-proxy/internal/inject"
)

// injectCmd runs `dedupe-proxy inject args...` with stdin as its input.
func injectCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return execute(append([]string{"inject"}, args...), stdin, stdout, stderr)
}

// injectCommand is `dedupe-proxy inject`: manifests in, manifests out. It
// writes nothing to stdout on error, so `kubectl apply -f <(...)` and a
// Helm post-renderer fail instead of applying half a stream.
func injectCommand() *cobra.Command {
	c := &cobra.Command{
		Use:  "inject [-f FILE|-] [--image IMAGE] [-q]",
		Long: injectHelp,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(c, "inject: unexpected argument %q (use -f FILE)", args[0])
			}
			return nil
		},
	}
	file := c.Flags().StringP("file", "f", "-", "the manifests `FILE` (- or absent: stdin)")
	image := c.Flags().String("image", inject.DefaultImage, "the proxy `IMAGE` where no "+inject.AnnotationImage+" annotation names one")
	quiet := c.Flags().BoolP("quiet", "q", false, "do not list the injected workloads on stderr")
	_ = c.Flags().SetAnnotation("file", cobra.BashCompFilenameExt, []string{"yaml", "yml", "json"})
	c.RunE = func(c *cobra.Command, _ []string) error {
		stdout, stderr := c.OutOrStdout(), c.ErrOrStderr()
		var in []byte
		var err error
		if *file == "-" {
			in, err = io.ReadAll(c.InOrStdin())
		} else {
			in, err = os.ReadFile(*file)
		}
		if err != nil {
			fmt.Fprintf(stderr, "inject: %v\n", err)
			return exitCode(1)
		}
		out, res, err := inject.Stream(in, inject.Options{Image: *image})
		if err != nil {
			fmt.Fprintf(stderr, "inject: %v\n", err)
			return exitCode(1)
		}
		if _, err := stdout.Write(out); err != nil {
			fmt.Fprintf(stderr, "inject: %v\n", err)
			return exitCode(1)
		}
		if n := len(res.Unpublished); n > 0 {
			// Even with -q: without it the pods never start.
			fmt.Fprintf(stderr, "dedupe-proxy inject: warning: %s is not published yet, so %d sidecar(s) cannot pull their image: build it from the repository's Dockerfile, push it and pass --image (or annotate %s)\n",
				inject.DefaultRepository, n, inject.AnnotationImage)
		}
		if !*quiet {
			list := "none"
			if len(res.Injected) > 0 {
				list = strings.Join(res.Injected, ", ")
			}
			fmt.Fprintf(stderr, "dedupe-proxy inject: %d document(s), sidecar in %d: %s\n", res.Documents, len(res.Injected), list)
		}
		return nil
	}
	return c
}
