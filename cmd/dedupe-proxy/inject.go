package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dedupe-proxy/dedupe-proxy/internal/inject"
)

// injectCmd is `dedupe-proxy inject`: manifests in, manifests out. It
// writes nothing to stdout on error, so `kubectl apply -f <(...)` and a
// Helm post-renderer fail instead of applying half a stream.
func injectCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "-", "manifest file; - reads stdin")
	image := fs.String("image", inject.DefaultImage, "proxy image for workloads without a "+inject.AnnotationImage+" annotation")
	quiet := fs.Bool("q", false, "do not list the injected workloads on stderr")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return help([]string{"inject"}, stdout, stderr)
		}
		fmt.Fprintln(stderr, "see: dedupe-proxy help inject")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "inject: unexpected argument %q (use -f FILE)\n", fs.Arg(0))
		return 2
	}
	var in []byte
	var err error
	if *file == "-" {
		in, err = io.ReadAll(stdin)
	} else {
		in, err = os.ReadFile(*file)
	}
	if err != nil {
		fmt.Fprintf(stderr, "inject: %v\n", err)
		return 1
	}
	out, res, err := inject.Stream(in, inject.Options{Image: *image})
	if err != nil {
		fmt.Fprintf(stderr, "inject: %v\n", err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "inject: %v\n", err)
		return 1
	}
	if !*quiet {
		list := "none"
		if len(res.Injected) > 0 {
			list = strings.Join(res.Injected, ", ")
		}
		fmt.Fprintf(stderr, "dedupe-proxy inject: %d document(s), sidecar in %d: %s\n", res.Documents, len(res.Injected), list)
	}
	return 0
}
