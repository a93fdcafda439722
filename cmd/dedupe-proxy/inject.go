package main

import (
	"fmt"
	"io"
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
		Use:  "inject [-f FILE|DIR|-] [--image IMAGE] [-q]",
		Long: injectHelp,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(c, "inject: unexpected argument %q (use -f FILE)", args[0])
			}
			return nil
		},
	}
	file := c.Flags().StringP("file", "f", "-", "the manifests `FILE`, or a directory's *.yaml, *.yml and *.json files (- or absent: stdin)")
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
			in, err = inject.ReadManifests(*file)
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
		// Even with -q: these pods would wait in ContainerCreating.
		for _, w := range res.WrongConfigMap {
			fmt.Fprintf(stderr, "dedupe-proxy inject: warning: %s\n", w)
		}
		if len(res.NoConfigMap) > 0 && !*quiet {
			fmt.Fprintf(stderr, "dedupe-proxy inject: note: the input holds no dedupe-proxy ConfigMap; each of these pods starts only once its ConfigMap exists in its namespace (%s): install the chart in mode shared as a release of that full name (release %s: helm install %s ./helm/dedupe-proxy --set mode=shared -f values.yaml), or name the one you have with the annotation %s\n",
				strings.Join(res.NoConfigMap, ", "), inject.DefaultConfigMap, inject.DefaultConfigMap, inject.AnnotationConfig)
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
