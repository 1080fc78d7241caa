package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/stack"
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
// dir means no files and passes. The returned func removes again the
// directories outDir created that are still empty, so that a command that
// fails before writing anything (a stack that cannot start) leaves no
// empty ./reports behind; the caller defers it.
func outDir(flagName, dir string) (func(), error) {
	none := func() {}
	if dir == "" {
		return none, nil
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return none, usageError{fmt.Sprintf("--%s %s is a file, not a directory; pass a directory (it is created if missing)", flagName, dir)}
	}
	var created []string // deepest first
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		var pe *iofs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return none, fmt.Errorf("cannot create --%s %s (%v); pass a directory you can write to", flagName, dir, err)
	}
	return func() {
		for _, d := range created {
			if os.Remove(d) != nil { // not empty: it holds what the command wrote
				return
			}
		}
	}, nil
}

// replicasHelp describes the --replicas flag of run and chaos.
var replicasHelp = fmt.Sprintf("competing replica processes, 1 to %d (default: the scenario's own, 2)", scenarios.MaxReplicas)

// replicasOf returns the --replicas the command line gave, 0 when it gave
// none. An explicit 0 is a usage error: a scenario reads 0 as its
// default, so it cannot stand for itself. Its range is Validate's.
func replicasOf(fs *flagSet, n int) (int, error) {
	if !fs.isSet("replicas") {
		return 0, nil
	}
	if n == 0 {
		return 0, usageError{fmt.Sprintf("--replicas 0 is not a number of replicas; use 1 to %d, or leave it out for the scenario's own (2)", scenarios.MaxReplicas)}
	}
	return n, nil
}

// validate checks sc, once the flags are applied, with Scenario.Validate,
// the one place that knows a scenario's ranges. A field that a flag set
// is named as that flag (flagOf maps a field to its flag name); the
// complaints are one line.
func validate(sc scenarios.Scenario, flagOf map[string]string) error {
	return flagged(sc.Validate(), flagOf)
}

// flagged is err, a usage error, with each of Validate's complaints about
// a field that a flag set named as that flag (flagOf maps a field to its
// flag name); nil for nil.
func flagged(err error, flagOf map[string]string) error {
	if err == nil {
		return nil
	}
	fes := scenarios.FieldErrors(err)
	if len(fes) == 0 {
		return usageError{err.Error()}
	}
	var msgs []string
	for _, fe := range fes {
		if flagOf[fe.Field] != "" {
			msgs = append(msgs, fe.Flag(flagOf[fe.Field]))
			continue
		}
		msgs = append(msgs, fe.Error())
	}
	return usageError{strings.Join(msgs, "; ")}
}

// poolSize is the --tx-pool-size flag: a transaction pool size, checked
// by stack.CheckPoolSize (whose words DOUBLERUN_TRANSACTION_POOL_SIZE's
// error shares); 0 means it was not given.
type poolSize int

func (p *poolSize) String() string {
	if p == nil {
		return "0"
	}
	return strconv.Itoa(int(*p))
}

// Set accepts a whole number from 1 to stack.MaxPoolSize.
func (p *poolSize) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err == nil {
		err = stack.CheckPoolSize(n)
	}
	if err != nil {
		return fmt.Errorf("is not a pool size from 1 to %d (%s); leave it out or set one such as 1", stack.MaxPoolSize, stack.MaxPoolSizeWhy)
	}
	*p = poolSize(n)
	return nil
}
