package stack

import "fmt"

// VersionsAsked is the version set the caller (Options.Versions) or the
// environment (DOUBLERUN_VERSIONS) named, "" when neither did.
func (s *Stack) VersionsAsked() string { return s.asked }

// VersionsNote says, for a report, that the stack runs other versions than
// the set asked for: the native provider runs the host's binaries and the
// external one what it is given, whatever set is named. It is "" when no
// set was asked for or the servers match it.
func (s *Stack) VersionsNote() string {
	have := s.Versions().Set
	if s.asked == "" || s.asked == have {
		return ""
	}
	return fmt.Sprintf("version set %s was asked for, but the %s provider runs %s (its servers', not the set's)", s.asked, s.provider, have)
}
