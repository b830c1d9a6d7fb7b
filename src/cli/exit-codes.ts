// One exit code per outcome, the same for `playbook run`, the pod runner and every command that
// waits on a cluster run (DESIGN's "Local mode" table), so a script can tell a limit from a failure;
// the table itself is src/api/exit-codes.ts, which the controller holds the pod runner to.
export { EXIT, exitCodeForReason } from "../api/exit-codes.js";

/** The table in words, for --help: which reason gives which code. */
export const EXIT_CODES_HELP = [
  "Exit codes (the run's outcome, condition Succeeded's reason):",
  "  0    Succeeded",
  "  1    TaskFailed",
  "  2    invalid input or InvalidSpec (nothing was run)",
  "  3    the outcome was lost: PodLost, RunnerLost, or the cluster could not be reached",
  "  124  a limit fired: TaskTimeout, StallLimit, RunCeiling, PodDeadlineExceeded, StartTimeout",
  "  130  Cancelled, or interrupted (Ctrl-C)",
].join("\n");
