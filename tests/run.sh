#!/bin/sh
# Runs each test binary given as an argument, sums their "RESULT p f s" lines and prints the
# closing line "N passed, N failed, N skipped". Exit status is non-zero if anything failed or a
# binary crashed (a crash counts as one failure).
passed=0; failed=0; skipped=0
for t in "$@"; do
    name=$(basename "$t")
    out=$("$t" 2>/tmp/rf-test-$$.err); rc=$?
    line=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
    printf '%s\n' "$out" | grep -v '^RESULT ' | sed "s/^/[$name] /"
    if [ -n "$line" ]; then
        set -- $line
        p=$2; f=$3; s=$4
        set --
    else
        p=0; f=1; s=0
        echo "[$name] crashed or printed no RESULT line (exit $rc)"
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "[$name] exit status $rc"; fi
    if [ "$f" -ne 0 ]; then sed "s/^/[$name] /" /tmp/rf-test-$$.err | tail -n 40; fi
    grep -h '^SKIP' /tmp/rf-test-$$.err | sed "s/^/[$name] /" | head -n 5
    echo "[$name] $p passed, $f failed, $s skipped"
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
rm -f /tmp/rf-test-$$.err
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
