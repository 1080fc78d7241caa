package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/doublerun/doublerun/scenarios/stack"
)

// envChaosVersions selects the chaos matrix's version sets, "all" for
// every one; it comes before DOUBLERUN_VERSIONS, which the stack reads.
const envChaosVersions = "CHAOS_VERSIONS"

// versionsHelp describes the --versions flag of run and repro.
var versionsHelp = fmt.Sprintf("version set of the servers: %s (default: %s, else %s, the newest); the native provider runs the host's binaries whatever is named",
	strings.Join(versionSetNames(), ", "), stack.EnvVersions, stack.DefaultVersions)

// chaosVersionsHelp describes the --versions flag of chaos.
var chaosVersionsHelp = fmt.Sprintf("version sets, comma-separated, or all: %s (default: %s, else %s, else %s, the newest); one stack per set, one after another",
	strings.Join(versionSetNames(), ", "), envChaosVersions, stack.EnvVersions, stack.DefaultVersions)

func versionSetNames() []string {
	var names []string
	for _, s := range stack.VersionSets() {
		names = append(names, s.Name)
	}
	return names
}

// oneVersionSet checks the --versions of a command that runs one stack;
// "" leaves the choice to the stack (DOUBLERUN_VERSIONS, else the newest).
func oneVersionSet(flagValue string) (string, error) {
	v := strings.TrimSpace(flagValue)
	if v == "" {
		return "", nil
	}
	if v == "all" {
		return "", usageError{fmt.Sprintf("--versions all is for doublerun chaos; this command runs one stack: use one of %s", strings.Join(versionSetNames(), ", "))}
	}
	if _, err := stack.LookupVersionSet(v); err != nil {
		return "", usageError{fmt.Sprintf("unknown version set %q for --versions; use one of %s, or leave it out for %s", v, strings.Join(versionSetNames(), ", "), stack.DefaultVersions)}
	}
	return v, nil
}

// chaosVersionSets resolves the chaos matrix's version sets: the flag,
// else CHAOS_VERSIONS, else DOUBLERUN_VERSIONS, else the newest; "all" is
// every set, oldest first. An unknown name is an error that says where it
// came from and lists the valid ones.
func chaosVersionSets(flagValue string, getenv func(string) string) ([]string, error) {
	from, list := "--versions", strings.TrimSpace(flagValue)
	for _, k := range []string{envChaosVersions, stack.EnvVersions} {
		if list == "" {
			from, list = k, strings.TrimSpace(getenv(k))
		}
	}
	if list == "" {
		return []string{stack.DefaultVersions}, nil
	}
	if list == "all" {
		return versionSetNames(), nil
	}
	var out []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if _, err := stack.LookupVersionSet(name); err != nil || name == "" {
			msg := fmt.Sprintf("unknown version set %q in %s; use all or one or more of %s", name, from, strings.Join(versionSetNames(), ", "))
			if from == "--versions" {
				return nil, usageError{msg}
			}
			return nil, envError{msg}
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// startStackOn starts a stack of the version set versions ("" for the
// stack's own choice), with a standby in mode standby ("" for none), and
// returns its cleanup.
func startStackOn(ctx context.Context, e *env, versions string, standby stack.ReplicationMode) (*stack.Stack, func(), error) {
	s, err := stack.Start(ctx, stack.Options{Logger: e.log, Versions: versions, Replication: standby})
	if err != nil {
		return nil, nil, err
	}
	return s, func() {
		if err := s.Shutdown(ctx); err != nil {
			e.log.Error("stack cleanup", "err", err)
		}
	}, nil
}

// versionsLine is the line a command prints about the servers it runs on.
func versionsLine(s *stack.Stack) string {
	v := s.Versions()
	line := fmt.Sprintf("versions: %s (Postgres %s, PgBouncer %s; provider %s)", v.Set, v.Postgres, v.PgBouncer, s.Provider())
	if note := s.VersionsNote(); note != "" {
		line += "\nnote: " + note
	}
	return line
}
