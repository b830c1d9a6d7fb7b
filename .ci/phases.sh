# shellcheck shell=bash
# The phases of .ci/run and their wall times: `step NAME` starts one (printed as "==> NAME") and
# ends the one before; `phase_times` ends the last and prints a table of each phase's seconds, so
# a run that nears CI's limit shows where its time went. Sourced, not run.

phase_names=()
phase_seconds=()
phase_started=""

end_phase() {
  [ -n "$phase_started" ] || return 0
  phase_seconds+=($((SECONDS - phase_started)))
  phase_started=""
}

step() {
  end_phase
  printf '\n==> %s\n' "$*"
  # The table names a phase by its words before any "(" or ":"; the log keeps the whole line.
  local name=${1%%[(:]*}
  phase_names+=("${name% }")
  phase_started=$SECONDS
}

phase_times() {
  end_phase
  local i total=0
  printf '\n==> phase times\n'
  for i in "${!phase_names[@]}"; do
    printf '%-32s %6d s\n' "${phase_names[$i]}" "${phase_seconds[$i]}"
    total=$((total + phase_seconds[i]))
  done
  printf '%-32s %6d s\n' total "$total"
}
