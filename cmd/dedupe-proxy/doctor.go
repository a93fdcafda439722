package main

import (
	"context"
	"io"
	"os"
	"os/signal"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/doctor"
)

// runDoctor is `dedupe-proxy doctor`: exit 1 when any check failed.
func runDoctor(cfg *config.Config, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var r doctor.Report
	for _, w := range cfg.Warnings() {
		r = append(r, doctor.Result{Level: doctor.Warn, Check: "config " + w.Path, Finding: w.Msg})
	}
	r = append(r, doctor.Run(ctx, cfg, doctor.Options{})...)
	r.Print(stdout)
	if r.Failed() {
		return exitCode(1)
	}
	return nil
}
