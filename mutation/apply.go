package mutation

import (
	"fmt"
	"go/scanner"
	"go/token"
)

// tokenMutations is gremlins v0.6.0's table of what each mutator turns a
// token into (internal/engine/mappings.go there), so that a mutant the
// gate applies itself, to re-run it alone, is the mutant gremlins ran.
var tokenMutations = map[string]map[token.Token]token.Token{
	"ARITHMETIC_BASE":       {token.ADD: token.SUB, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL, token.SUB: token.ADD},
	"CONDITIONALS_BOUNDARY": {token.GEQ: token.GTR, token.GTR: token.GEQ, token.LEQ: token.LSS, token.LSS: token.LEQ},
	"CONDITIONALS_NEGATION": {token.EQL: token.NEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR,
		token.LSS: token.GEQ, token.NEQ: token.EQL},
	"INCREMENT_DECREMENT": {token.DEC: token.INC, token.INC: token.DEC},
	"INVERT_ASSIGNMENTS": {token.ADD_ASSIGN: token.SUB_ASSIGN, token.MUL_ASSIGN: token.QUO_ASSIGN, token.QUO_ASSIGN: token.MUL_ASSIGN,
		token.REM_ASSIGN: token.REM_ASSIGN, token.SUB_ASSIGN: token.ADD_ASSIGN},
	"INVERT_BITWISE": {token.AND: token.OR, token.OR: token.AND, token.XOR: token.AND, token.AND_NOT: token.AND,
		token.SHL: token.SHR, token.SHR: token.SHL},
	"INVERT_BWASSIGN": {token.AND_ASSIGN: token.OR_ASSIGN, token.OR_ASSIGN: token.AND_ASSIGN, token.XOR_ASSIGN: token.AND_ASSIGN,
		token.AND_NOT_ASSIGN: token.AND_ASSIGN, token.SHL_ASSIGN: token.SHR_ASSIGN, token.SHR_ASSIGN: token.SHL_ASSIGN},
	"INVERT_LOGICAL":   {token.LAND: token.LOR, token.LOR: token.LAND},
	"INVERT_LOOPCTRL":  {token.BREAK: token.CONTINUE, token.CONTINUE: token.BREAK},
	"INVERT_NEGATIVES": {token.SUB: token.ADD},
	"REMOVE_SELF_ASSIGNMENTS": {token.ADD_ASSIGN: token.ASSIGN, token.AND_ASSIGN: token.ASSIGN, token.AND_NOT_ASSIGN: token.ASSIGN,
		token.MUL_ASSIGN: token.ASSIGN, token.OR_ASSIGN: token.ASSIGN, token.QUO_ASSIGN: token.ASSIGN, token.REM_ASSIGN: token.ASSIGN,
		token.SHL_ASSIGN: token.ASSIGN, token.SHR_ASSIGN: token.ASSIGN, token.SUB_ASSIGN: token.ASSIGN, token.XOR_ASSIGN: token.ASSIGN},
}

// ApplyMutant returns src with gremlins' mutant of the given mutator at
// line:column (gremlins' report, 1-based, the column in bytes) applied:
// the token that starts there replaced as gremlins v0.6.0 replaces it.
// gremlins reprints the whole file from its syntax tree; replacing the
// token's bytes gives the same program. It fails when no token starts
// there or the mutator does not apply to that token, which means the
// source is not the one gremlins mutated.
func ApplyMutant(src []byte, line, column int, mutator string) ([]byte, error) {
	table, ok := tokenMutations[mutator]
	if !ok {
		return nil, fmt.Errorf("unknown mutator %q", mutator)
	}
	fset := token.NewFileSet()
	file := fset.AddFile("src.go", -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, 0)
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			return nil, fmt.Errorf("no token starts at %d:%d", line, column)
		}
		p := file.Position(pos)
		if p.Line < line || (p.Line == line && p.Column < column) {
			continue
		}
		if p.Line != line || p.Column != column {
			return nil, fmt.Errorf("no token starts at %d:%d", line, column)
		}
		to, ok := table[tok]
		if !ok {
			return nil, fmt.Errorf("%d:%d is %q, which %s does not mutate", line, column, tok, mutator)
		}
		off := file.Offset(pos)
		out := make([]byte, 0, len(src)+2)
		out = append(out, src[:off]...)
		out = append(out, to.String()...)
		return append(out, src[off+len(tok.String()):]...), nil
	}
}
