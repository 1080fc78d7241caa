package mutation

import (
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every mutator turns every token it applies to into what gremlins v0.6.0
// turns it into, at exactly the token the report names, and the result is
// still Go.
func TestApplyMutant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mutator, from, to string
	}{
		{"ARITHMETIC_BASE", "x = a + b", "x = a - b"},
		{"ARITHMETIC_BASE", "x = a - b", "x = a + b"},
		{"ARITHMETIC_BASE", "x = a * b", "x = a / b"},
		{"ARITHMETIC_BASE", "x = a / b", "x = a * b"},
		{"ARITHMETIC_BASE", "x = a % b", "x = a * b"},
		{"CONDITIONALS_BOUNDARY", "y = a < b", "y = a <= b"},
		{"CONDITIONALS_BOUNDARY", "y = a <= b", "y = a < b"},
		{"CONDITIONALS_BOUNDARY", "y = a > b", "y = a >= b"},
		{"CONDITIONALS_BOUNDARY", "y = a >= b", "y = a > b"},
		{"CONDITIONALS_NEGATION", "y = a == b", "y = a != b"},
		{"CONDITIONALS_NEGATION", "y = a != b", "y = a == b"},
		{"CONDITIONALS_NEGATION", "y = a < b", "y = a >= b"},
		{"CONDITIONALS_NEGATION", "y = a <= b", "y = a > b"},
		{"CONDITIONALS_NEGATION", "y = a > b", "y = a <= b"},
		{"CONDITIONALS_NEGATION", "y = a >= b", "y = a < b"},
		{"INCREMENT_DECREMENT", "a++", "a--"},
		{"INCREMENT_DECREMENT", "a--", "a++"},
		{"INVERT_ASSIGNMENTS", "a += b", "a -= b"},
		{"INVERT_ASSIGNMENTS", "a -= b", "a += b"},
		{"INVERT_ASSIGNMENTS", "a *= b", "a /= b"},
		{"INVERT_ASSIGNMENTS", "a /= b", "a *= b"},
		{"INVERT_ASSIGNMENTS", "a %= b", "a %= b"},
		{"INVERT_BITWISE", "x = a & b", "x = a | b"},
		{"INVERT_BITWISE", "x = a | b", "x = a & b"},
		{"INVERT_BITWISE", "x = a ^ b", "x = a & b"},
		{"INVERT_BITWISE", "x = a &^ b", "x = a & b"},
		{"INVERT_BITWISE", "x = a << b", "x = a >> b"},
		{"INVERT_BITWISE", "x = a >> b", "x = a << b"},
		{"INVERT_BWASSIGN", "a &= b", "a |= b"},
		{"INVERT_BWASSIGN", "a |= b", "a &= b"},
		{"INVERT_BWASSIGN", "a ^= b", "a &= b"},
		{"INVERT_BWASSIGN", "a &^= b", "a &= b"},
		{"INVERT_BWASSIGN", "a <<= b", "a >>= b"},
		{"INVERT_BWASSIGN", "a >>= b", "a <<= b"},
		{"INVERT_LOGICAL", "y = c && d", "y = c || d"},
		{"INVERT_LOGICAL", "y = c || d", "y = c && d"},
		{"INVERT_LOOPCTRL", "for { break }", "for { continue }"},
		{"INVERT_LOOPCTRL", "for { continue }", "for { break }"},
		{"INVERT_NEGATIVES", "x = -a", "x = +a"},
		{"REMOVE_SELF_ASSIGNMENTS", "a += b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a -= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a *= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a /= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a %= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a &= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a |= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a ^= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a &^= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a <<= b", "a = b"},
		{"REMOVE_SELF_ASSIGNMENTS", "a >>= b", "a = b"},
	} {
		t.Run(tc.mutator+"/"+tc.from, func(t *testing.T) {
			t.Parallel()
			// The statement sits on line 4 behind a tab, after a decoy
			// of the same operator on line 3: only the named token
			// changes.
			const head = "package p\n\nfunc f(a, b int, c, d bool) (x int, y bool) {\n\t_ = a + b - a*b/b%b&b|b^b&^b<<b>>b; _ = a < b || c && a <= b || a > b || a >= b || a == b || a != b\n\t"
			src := head + tc.from + "\n\treturn\n}\n"
			col := 2 + opOffset(t, tc.from, tc.to)
			got, err := ApplyMutant([]byte(src), 5, col, tc.mutator)
			require.NoError(t, err)
			require.Equal(t, head+tc.to+"\n\treturn\n}\n", string(got))
			_, err = parser.ParseFile(token.NewFileSet(), "p.go", got, 0)
			require.NoError(t, err, "the mutant is Go")
		})
	}
}

// opOffset is the offset in from of the token that becomes to: where the
// two first differ, moved back to the start of the operator there (the
// first of several operator characters). A mutant that changes nothing
// (%= stays %=) is at the first operator.
func opOffset(t *testing.T, from, to string) int {
	t.Helper()
	isOp := func(c byte) bool { return c != ' ' && c != '{' && c != '}' && !('a' <= c && c <= 'z') }
	i := 0
	for i < len(from) && i < len(to) && from[i] == to[i] {
		i++
	}
	if i == len(from) {
		for i = 0; !isOp(from[i]); i++ {
		}
	}
	for i > 0 && isOp(from[i-1]) {
		i--
	}
	return i
}

// A position that is not the token the mutator mutates means the source is
// not the one gremlins mutated: ApplyMutant refuses it rather than guess.
func TestApplyMutantRefuses(t *testing.T) {
	t.Parallel()
	src := []byte("package p\n\nvar x = 1 + 2\n")
	_, err := ApplyMutant(src, 3, 11, "ARITHMETIC_BASE")
	require.NoError(t, err)
	for _, tc := range []struct {
		line, col int
		mutator   string
		want      string
	}{
		{3, 12, "ARITHMETIC_BASE", "no token starts at 3:12"},
		{3, 10, "ARITHMETIC_BASE", "no token starts at 3:10"},
		{9, 1, "ARITHMETIC_BASE", "no token starts at 9:1"},
		{3, 9, "ARITHMETIC_BASE", `3:9 is "INT", which ARITHMETIC_BASE does not mutate`},
		{3, 11, "CONDITIONALS_BOUNDARY", `3:11 is "+", which CONDITIONALS_BOUNDARY does not mutate`},
		{3, 11, "SWAP", `unknown mutator "SWAP"`},
	} {
		_, err := ApplyMutant(src, tc.line, tc.col, tc.mutator)
		require.EqualError(t, err, tc.want)
	}
	for _, m := range mutators {
		require.Contains(t, tokenMutations, m, "gremlins' mutator %s has a token table", m)
	}
}
