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
	"slices"
	"sort"
	"strings"
	"syscall"

	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/doublerun/doublerun/scenarios/reexec"
	"github.com/doublerun/doublerun/scenarios/report"
	"github.com/doublerun/doublerun/scenarios/stack"
)

// version is set at build time with -ldflags "-X main.version=..."; the
// module version from the build info is used otherwise.
var version = ""

// command is one subcommand. run returns its error; finish turns that
// into the exit code and the line on stderr.
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

// usageError makes a command exit 2 and print its usage on stderr after
// the message.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// envError is a usage error in an environment variable the command reads
// itself (CHAOS_*), as stack.EnvError is in one the stack reads: exit 2,
// one line naming the variable, and no usage, which is about flags.
type envError struct{ msg string }

func (e envError) Error() string { return e.msg }

// flagError is a usage error found while parsing a flag set; the usage
// printed after it is that flag set's, flags included (a subcommand's,
// such as stack up's, rather than the command's).
type flagError struct{ msg, usage string }

func (e flagError) Error() string { return e.msg }

func commands() []command {
	return []command{
		listCommand(),
		runCommand(),
		reproCommand(),
		chaosCommand(),
		failoverCommand(),
		benchCommand(),
		checkCommand(),
		replicaCommand(),
		stackCommand(),
		mutationCommand(),
		versionCommand(),
	}
}

func main() {
	// A scenario replica, a replica command's keeper and a failover
	// trial's leader are this binary started again (package reexec); as
	// one, Main does not return.
	reexec.Main()
	// The signals stay caught until the process exits: a stop() before
	// os.Exit gave them back their default action, and a second Ctrl-C
	// in between killed the run by signal instead of its exit 130
	// (TestRunInterruptedDuringTheGracePeriod, whose second SIGINT came
	// 100 ms after the first, as a run on the shared stack had already
	// finished).
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	level := slog.LevelInfo
	if os.Getenv("DOUBLERUN_DEBUG") != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	tclog.SetDefault(tcLogger{logger})
	e := &env{stdout: stdout, stderr: stderr, log: logger}

	if len(args) == 0 || isHelp(args[0]) || (args[0] == "help" && len(args) == 1) {
		printHelp(stdout)
		return 0
	}
	if args[0] == "help" && args[1] == "help" {
		printHelp(stdout)
		return 0
	}
	if args[0] == "help" {
		// `help CMD [SUB]` is `CMD [SUB] --help`: the same text, on stdout.
		if _, ok := lookupCommand(args[1]); !ok {
			fmt.Fprintf(stderr, "doublerun help: unknown command %q; valid commands: %s\n", args[1], strings.Join(commandNames(), ", "))
			return 2
		}
		args = append(slices.Clone(args[1:]), "--help")
	}
	c, ok := lookupCommand(args[0])
	if !ok {
		fmt.Fprintf(stderr, "doublerun: unknown command %q; valid commands: %s\n", args[0], strings.Join(commandNames(), ", "))
		return 2
	}
	return finish(ctx, stderr, c, c.run(ctx, e, args[1:]))
}

// finish prints what a command's error calls for on stderr and returns the
// exit code: 0 for success and asked-for help, 2 for a usage error (its
// line, then the usage) and for an environment variable the command cannot
// take (its line), 130 when Ctrl-C or SIGTERM ended the command (as a
// shell reports SIGINT), 1 for anything else. Every message is one line
// that begins with the command's name. README.md's table of exit codes
// says the same, and TestExitCodesAsTheREADMESays runs its examples.
func finish(ctx context.Context, stderr io.Writer, c command, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if ctx.Err() != nil {
		msg := oneLine(err)
		if !strings.HasPrefix(msg, "interrupted") {
			msg = "interrupted; everything it started has been stopped"
		}
		fmt.Fprintf(stderr, "doublerun %s: %s\n", c.name, msg)
		return 130
	}
	var fe flagError
	if errors.As(err, &fe) {
		fmt.Fprintf(stderr, "doublerun %s: %s\n\n%s", c.name, fe.msg, fe.usage)
		return 2
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "doublerun %s: %s\n\n%s", c.name, ue.msg, c.usage)
		return 2
	}
	var ee envError
	var se *stack.EnvError
	if errors.As(err, &ee) || errors.As(err, &se) {
		fmt.Fprintf(stderr, "doublerun %s: %s\n", c.name, oneLine(err))
		return 2
	}
	fmt.Fprintf(stderr, "doublerun %s: %s\n", c.name, oneLine(err))
	return 1
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// isHelp reports whether arg asks for help the way flag understands it.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--h", "--help":
		return true
	}
	return false
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
	fmt.Fprintln(w, "Run `doublerun help <command>` (or `doublerun <command> --help`) for a command's flags.")
}

// oneLine keeps the first line of an error, which by house rule names what
// failed and what to do; server logs that follow go to the debug log.
func oneLine(err error) string {
	if os.Getenv("DOUBLERUN_DEBUG") != "" {
		return err.Error()
	}
	return report.FirstLine(err)
}

const versionUsage = "Usage: doublerun version\n\nPrints the version of this build and the Go toolchain.\n"

func versionCommand() command {
	return command{
		name:    "version",
		summary: "print doublerun's version",
		usage:   versionUsage,
		run: func(_ context.Context, e *env, args []string) error {
			fs := newFlagSet("version", versionUsage, e)
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

type tcLogger struct{ l *slog.Logger }

func (t tcLogger) Printf(format string, v ...any) {
	t.l.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "testcontainers")
}
