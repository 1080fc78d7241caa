#!/usr/bin/env bash
# Regenerates the go test output samples the classifier's tests read, by
# running real `go test -v` invocations on the fixture module, some with an
# overlay that mutates clamp.go. Each sample is NAME.txt (stdout and stderr
# combined, as the runner captures them) and NAME.exit (the exit code).
# Paths and timings in the samples differ from run to run; nothing else
# should.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fixture=$here/../fixture
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$fixture/clamp/clamp.go

# mutate NAME SNIPPET REPLACEMENT: writes an overlay replacing SNIPPET once.
mutate() {
  python3 - "$src" "$tmp/$1.go" "$2" "$3" <<'PY'
import sys
src, dst, old, new = sys.argv[1:]
text = open(src).read()
assert text.count(old) == 1, (old, text.count(old))
open(dst, "w").write(text.replace(old, new))
PY
  printf '{"Replace":{"%s":"%s"}}' "$src" "$tmp/$1.go" > "$tmp/$1.json"
  echo "-overlay=$tmp/$1.json"
}

# sample NAME ARGS...: runs go test -count=1 -v ARGS in the fixture.
sample() {
  local name=$1; shift
  (cd "$fixture" && go test -count=1 -v "$@") > "$here/$name.txt" 2>&1
  echo $? > "$here/$name.exit"
  echo "$name: exit $(cat "$here/$name.exit")"
}

sample pass -run '^TestClamp' ./clamp
sample killed "$(mutate killed 'if n > hi {' 'if false {')" -run '^TestClamp' ./clamp
sample killed-subtests "$(mutate subtests 'if n < lo {' 'if false {')" -run '^TestFloorTable$' ./clamp
sample goroutine-panic "$(mutate recover 'done <- recover() != nil' 'done <- false')" -run '^TestSafelyRecovers$' ./clamp
sample panic "$(mutate panic 'return hi' 'panic("mutant")')" -run '^TestClamp' ./clamp
sample build-failed "$(mutate build 'if n > hi {' 'if n > undefinedName {')" -run '^TestClamp' ./clamp
sample vet-failed "$(mutate vet 'if n > hi {' 'if n > hi || n > hi {')" -run '^TestClamp' ./clamp
sample setup-failed "$(mutate setup '"os"' '"doublerun.test/fixture/nosuchpackage"')" -run '^TestClamp' ./clamp
sample no-tests -run '^TestDoesNotExist$' ./clamp
sample baseline-failed -run '^TestKnownBroken$' ./broken
sample timed-out -timeout 3s "$(mutate loop 'i++' 'i += 0')" -run '^TestSum$' ./clamp
sample testmain-exits -run '^TestReady$' ./nostart
sample no-package -run '^TestClamp' ./nosuchdir
