// Command doublerun starts test stacks, runs lease scenarios and reports
// double-run and leaderless windows. Run `doublerun help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/report"
)

// version is set at build time with -ldflags "-X main.version=..."; the
// module version from the build info is used otherwise.
var version = ""

// command is one subcommand. run returns the process exit code.
type command struct {
	name    string
	summary string
	usage   string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a command may touch: its output streams and a logger.
type env struct {
	stdout, stderr io.Writer
	log            *slog.Logger
}

// usageError makes a command exit 2 and print its usage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func commands() []command {
	return []command{
		listCommand(),
		runCommand(),
		reproCommand(),
		chaosCommand(),
		stackCommand(),
		mutationCommand(),
		versionCommand(),
	}
}

func main() {
	// A scenario replica is this binary started again; it never returns.
	scenarios.MaybeRunReplica()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	level := slog.LevelInfo
	if os.Getenv("DOUBLERUN_DEBUG") != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	tclog.SetDefault(tcLogger{logger})
	e := &env{stdout: stdout, stderr: stderr, log: logger}

	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printHelp(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, e, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errSilentUsage):
			return 2
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "doublerun %s: %s\n\n%s", c.name, ue.msg, c.usage)
			return 2
		}
		fmt.Fprintf(stderr, "doublerun %s: %s\n", c.name, oneLine(err))
		return 1
	}
	fmt.Fprintf(stderr, "doublerun: unknown command %q; valid commands: %s\n", args[0], strings.Join(commandNames(), ", "))
	return 2
}

func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	sort.Strings(names)
	return names
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "doublerun measures whether a leader lease on PostgreSQL holds behind PgBouncer.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: doublerun <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `doublerun <command> --help` for a command's flags.")
}

// oneLine keeps the first line of an error, which by house rule names what
// failed and what to do; server logs that follow go to the debug log.
func oneLine(err error) string {
	if os.Getenv("DOUBLERUN_DEBUG") != "" {
		return err.Error()
	}
	return report.FirstLine(err)
}

func versionCommand() command {
	return command{
		name:    "version",
		summary: "print doublerun's version",
		usage:   "Usage: doublerun version\n\nPrints the version of this build and the Go toolchain.\n",
		run: func(_ context.Context, e *env, args []string) error {
			fs := newFlagSet("version", "Usage: doublerun version\n\nPrints the version of this build and the Go toolchain.\n", e)
			if err := parse(fs, args); err != nil {
				return err
			}
			v := version
			info, ok := debug.ReadBuildInfo()
			if v == "" && ok {
				v = info.Main.Version
			}
			if v == "" || v == "(devel)" {
				v = "devel"
			}
			goVersion := "unknown"
			if ok {
				goVersion = info.GoVersion
			}
			fmt.Fprintf(e.stdout, "doublerun %s (%s)\n", v, goVersion)
			return nil
		},
	}
}

// newFlagSet returns a flag set that prints usage to stderr and reports
// errors rather than exiting.
func newFlagSet(name, usage string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, usage)
		if hasFlags(fs) {
			fmt.Fprintln(e.stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parse parses args and rejects positional arguments the command does not
// take. flag already printed its own message for a bad flag, so the error
// returned for one exits 2 without printing usage twice.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errSilentUsage
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

var errSilentUsage = silentUsage{}

type silentUsage struct{}

func (silentUsage) Error() string { return "invalid flags" }

type tcLogger struct{ l *slog.Logger }

func (t tcLogger) Printf(format string, v ...any) {
	t.l.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "testcontainers")
}
