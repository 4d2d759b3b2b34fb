# Step timing for scripts/test.sh (sourced): each step is named, timed and
# logged, steps may run in the background side by side, and the run ends with
# a table of every step's time (also when a step fails) and one line counting
# the tests that every runner reported.
#
#   step NAME CMD...        runs CMD in the foreground; its output goes to this terminal
#   step_bg ID NAME CMD...  starts CMD in the background; output to $STEPS_DIR/ID.log
#   step_wait ID            waits for it and prints its log; fails when it failed
#   steps_stop_all          stops the background steps still running
#   steps_table             the table, a warning past STEPS_BUDGET_S, the test count
#
# CMD runs with `set -e` in a subshell, so a failing command inside a shell
# function fails its step. Call `step` as a plain command, never in `if`, `||`
# or `&&`: bash ignores `set -e` in everything such a context runs.
# A background step's log is printed whole when it is waited for, so the log
# keeps every line, grouped by step rather than interleaved. Functions and
# variables a background step uses must be exported (`export -f`).

STEPS_DIR="${STEPS_DIR:-$(mktemp -d)}"
STEPS_BUDGET_S="${STEPS_BUDGET_S:-2400}"
: >"$STEPS_DIR/times.tsv"
: >"$STEPS_DIR/foreground.log"
STEPS_STARTED=$SECONDS
STEPS_EPOCH=$(date +%s)

# "name<TAB>start<TAB>seconds<TAB>status" (start: seconds since the run began).
_steps_record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STEPS_DIR/times.tsv"; }
_steps_status() { if [ "$1" -eq 0 ]; then echo ok; else echo "FAILED($1)"; fi; }

step() {
  local name="$1" start=$SECONDS status
  shift
  printf '\n==> [%ss] %s\n' "$((start - STEPS_STARTED))" "$name" | tee -a "$STEPS_DIR/foreground.log"
  set +e
  (
    set -e
    "$@"
  ) 2>&1 | tee -a "$STEPS_DIR/foreground.log"
  status=${PIPESTATUS[0]}
  set -e
  _steps_record "$name" "$((start - STEPS_STARTED))" "$((SECONDS - start))" "$(_steps_status "$status")"
  return "$status"
}

step_bg() {
  local id="$1" name="$2"
  shift 2
  printf '\n==> [%ss] %s: started in the background (log: %s)\n' "$((SECONDS - STEPS_STARTED))" "$name" "$STEPS_DIR/$id.log"
  echo "$name" >"$STEPS_DIR/$id.name"
  # Its own session, so that stopping it stops every process it started.
  setsid bash -c '
    set +e
    start=$(date +%s)
    ( set -e; "$@" )
    status=$?
    echo "$start $(( $(date +%s) - start )) $status" >"$0.done"
    exit "$status"' "$STEPS_DIR/$id" "$@" >"$STEPS_DIR/$id.log" 2>&1 </dev/null &
  echo "$!" >"$STEPS_DIR/$id.pid"
}

step_wait() {
  local id="$1" name pid status=0 start secs
  name="$(cat "$STEPS_DIR/$id.name")"
  pid="$(cat "$STEPS_DIR/$id.pid")"
  wait "$pid" || status=$?
  rm -f "$STEPS_DIR/$id.pid"
  printf '\n==> [%ss] %s: finished; its log:\n' "$((SECONDS - STEPS_STARTED))" "$name"
  cat "$STEPS_DIR/$id.log"
  if [ -f "$STEPS_DIR/$id.done" ]; then
    read -r start secs _ <"$STEPS_DIR/$id.done"
  else
    start=$STEPS_EPOCH
    secs=$(($(date +%s) - STEPS_EPOCH))
  fi
  _steps_record "$name (background)" "$((start - STEPS_EPOCH))" "$secs" "$(_steps_status "$status")"
  if [ "$status" -ne 0 ]; then
    echo "$name failed (exit $status); its log is above" >&2
    return "$status"
  fi
}

steps_stop_all() {
  local f
  for f in "$STEPS_DIR"/*.pid; do
    [ -e "$f" ] || continue
    kill -- -"$(cat "$f")" 2>/dev/null || true
  done
}

# Sums what the runners printed: cargo's "test result: ok. N passed; M failed; K ignored"
# and node's spec reporter's "ℹ pass N", "ℹ fail N", "ℹ cancelled N" (counted as failed),
# "ℹ skipped N" and "ℹ todo N".
_steps_count() {
  # foreground.log is one of the *.log files: each log is read once.
  cat "$STEPS_DIR"/*.log 2>/dev/null | awk '
    /^test result: / {
      for (i = 1; i <= NF; i++) {
        n = $i + 0
        if ($(i + 1) ~ /^passed/) pass += n
        if ($(i + 1) ~ /^failed/) fail += n
        if ($(i + 1) ~ /^ignored/) skip += n
      }
    }
    /^ℹ pass [0-9]+$/ { pass += $3 }
    /^ℹ (fail|cancelled) [0-9]+$/ { fail += $3 }
    /^ℹ (skipped|todo) [0-9]+$/ { skip += $3 }
    END {
      line = sprintf("%d passed, %d failed", pass, fail)
      if (skip > 0) line = line sprintf(", %d skipped", skip)
      print line
    }'
}

steps_table() {
  local total=$((SECONDS - STEPS_STARTED))
  printf '\n==> step times in seconds (a background step overlaps the ones beside it)\n'
  printf '%6s %6s  %-10s %s\n' start secs status step
  sort -t$'\t' -k2,2n "$STEPS_DIR/times.tsv" | while IFS=$'\t' read -r name start secs status; do
    printf '%6s %6s  %-10s %s\n' "$start" "$secs" "$status" "$name"
  done
  printf '%6s %6s  %-10s %s\n' "" "$total" "" "the whole run: $((total / 60)) min $((total % 60)) s"
  if [ "$total" -gt "$STEPS_BUDGET_S" ]; then
    echo "warning: the run took $((total / 60)) min $((total % 60)) s, over its budget of $((STEPS_BUDGET_S / 60)) min"
  fi
  echo "tests: $(_steps_count)"
}
