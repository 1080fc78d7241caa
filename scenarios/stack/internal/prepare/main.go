// Command prepare picks the route a doublerun stack takes on this machine
// and prints it in one line, building local images or installing packages
// on first use (stack.Prepare). `make test` runs it before `go test ./...`,
// whose test binaries start their stacks in parallel and show their output
// only when they fail.
package main

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/doublerun/doublerun/scenarios/stack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	level := slog.LevelInfo
	if os.Getenv("DOUBLERUN_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(lineHandler{w: os.Stderr, level: level})
	tclog.SetDefault(stdlog.New(io.Discard, "", 0)) // its banner is not the route
	if err := stack.Prepare(ctx, stack.Options{Logger: log}); err != nil {
		fmt.Fprintln(os.Stderr, "doublerun:", err)
		os.Exit(1)
	}
}

// lineHandler prints "doublerun: message key=value ..." lines.
type lineHandler struct {
	w     io.Writer
	level slog.Level
	attrs []slog.Attr
}

func (h lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("doublerun: " + r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteString("\n")
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return h
}

func (h lineHandler) WithGroup(string) slog.Handler { return h }
