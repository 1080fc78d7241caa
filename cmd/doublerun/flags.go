package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
)

// flagSet is a command's flag set with its usage text. flag itself prints
// nothing: parse sends asked-for help to stdout, and turns a bad flag into
// a flagError, which run prints on stderr in the house style.
type flagSet struct {
	*flag.FlagSet
	usage string
	e     *env
}

// newFlagSet returns the flag set of the command name, whose usage is
// printed for --help and after a usage error.
func newFlagSet(name, usage string, e *env) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, usage: usage, e: e}
}

// fullUsage is the usage text followed by the flags and their defaults.
func (fs *flagSet) fullUsage() string {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return fs.usage
	}
	var b strings.Builder
	b.WriteString(fs.usage)
	b.WriteString("\nFlags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}

// isSet reports whether the command line gave the flag name, so that an
// explicit zero can be told from a flag left out.
func (fs *flagSet) isSet(name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parse parses args and rejects positional arguments the command does not
// take. --help prints the usage on stdout and returns flag.ErrHelp (exit
// 0); a bad flag is a flagError that names it.
func parse(fs *flagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(fs.e.stdout, fs.fullUsage())
			return err
		}
		return flagError{msg: flagMessage(fs.FlagSet, err), usage: fs.fullUsage()}
	}
	if fs.NArg() > 0 {
		return flagError{msg: fmt.Sprintf("unexpected argument %q; this command takes only the flags listed below", fs.Arg(0)), usage: fs.fullUsage()}
	}
	return nil
}

// The messages of package flag, which name flags with one dash and say
// "parse error" without the value's form.
var (
	reUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	reNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.+)$`)
	reBadValue  = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-+([^:]+): (.*)$`)
)

// flagMessage rewrites package flag's error into a line that names the
// flag as the usage does (--name) and says what it takes.
func flagMessage(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := reUndefined.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown flag --%s; the flags are listed below", m[1])
	}
	if m := reNoValue.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s needs a value", m[1])
	}
	m := reBadValue.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, name, why := m[1], m[2], m[3]
	f := fs.Lookup(name)
	if f == nil {
		return msg
	}
	getter, ok := f.Value.(flag.Getter)
	if !ok {
		if strings.HasPrefix(why, "is ") { // a whole predicate, as positiveInt's
			return fmt.Sprintf("--%s=%s %s", name, value, why)
		}
		return fmt.Sprintf("--%s %s: %s", name, value, why)
	}
	switch getter.Get().(type) {
	case time.Duration:
		return fmt.Sprintf("--%s %s is not a duration; use one such as 30s, 2m or 1h30m", name, value)
	case int, int64, uint, uint64:
		return fmt.Sprintf("--%s %s is not a whole number", name, value)
	case float64:
		return fmt.Sprintf("--%s %s is not a number", name, value)
	case bool:
		return fmt.Sprintf("--%s takes true or false, not %s", name, value)
	}
	return fmt.Sprintf("--%s %s: %s", name, value, why)
}

// outDir checks an --out directory before anything starts, so that a run
// does not fail after minutes for want of a place to write: a path that
// is a file is a usage error, and the directory is created now. An empty
// dir means no files and passes.
func outDir(flagName, dir string) error {
	if dir == "" {
		return nil
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return usageError{fmt.Sprintf("--%s %s is a file, not a directory; pass a directory (it is created if missing)", flagName, dir)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		var pe *iofs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cannot create --%s %s (%v); pass a directory you can write to", flagName, dir, err)
	}
	return nil
}

// replicasHelp describes the --replicas flag of run and chaos.
var replicasHelp = fmt.Sprintf("competing replica processes, 1 to %d (default: the scenario's own, 2)", scenarios.MaxReplicas)

// replicasOf returns the --replicas the command line gave, 0 when it gave
// none, and a usage error for a number outside 1 to scenarios.MaxReplicas.
func replicasOf(fs *flagSet, n int) (int, error) {
	if !fs.isSet("replicas") {
		return 0, nil
	}
	if n < 1 {
		return 0, usageError{fmt.Sprintf("--replicas must be from 1 to %d, not %d; leave it out for the scenario's own (2)", scenarios.MaxReplicas, n)}
	}
	if n > scenarios.MaxReplicas {
		return 0, usageError{fmt.Sprintf("--replicas must be from 1 to %d, not %d: %s", scenarios.MaxReplicas, n, scenarios.MaxReplicasWhy)}
	}
	return n, nil
}

// positiveInt is an int flag that must be at least 1 when given; 0 means
// it was not. Its error has the form of DOUBLERUN_TRANSACTION_POOL_SIZE's
// (stack.Options.FromEnv), so the flag and the variable say the same.
type positiveInt int

func (p *positiveInt) String() string {
	if p == nil {
		return "0"
	}
	return strconv.Itoa(int(*p))
}

// Set accepts a whole number of at least 1.
func (p *positiveInt) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return errors.New("is not a positive integer; leave it out or set a pool size such as 1")
	}
	*p = positiveInt(n)
	return nil
}
