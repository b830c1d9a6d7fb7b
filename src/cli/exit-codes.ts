// One exit code per outcome, the same for `playbook run`, the pod runner and every command that
// waits on a cluster run (DESIGN's "Local mode" table), so a script can tell a limit from a failure;
// the outcomes' table itself is src/api/exit-codes.ts, which the controller holds the pod runner to.
// The commands that wait add one code of their own: 4, their own --timeout ran out (the run, or the
// controller's answer, may still come), which no outcome and no fired limit shares.
import { EXIT as OUTCOME_EXIT } from "../api/exit-codes.js";

export { exitCodeForReason } from "../api/exit-codes.js";

export const EXIT = { ...OUTCOME_EXIT, waitTimedOut: 4 } as const;

const OUTCOME_ROWS = [
  "  0    Succeeded",
  "  1    TaskFailed",
  "  2    invalid input or InvalidSpec (nothing was run)",
  "  3    the outcome was lost: PodLost, RunnerLost, Preempted, or the cluster could not be reached",
];
const LIMIT_ROWS = [
  "  124  a limit fired: TaskTimeout, StallLimit, RunCeiling, PodDeadlineExceeded, StartTimeout, QueueTimeout",
  "  130  Cancelled, or interrupted (Ctrl-C)",
];
const HEADING = "Exit codes (the run's outcome, condition Succeeded's reason):";

/** The table in words, for the --help of a command with no --timeout of its own (run, submit). */
export const EXIT_CODES_HELP = [HEADING, ...OUTCOME_ROWS, ...LIMIT_ROWS].join("\n");

/** The table with 4, for the --help of a command that waits with a --timeout (wait, cancel). */
export const WAIT_EXIT_CODES_HELP = [
  HEADING,
  ...OUTCOME_ROWS,
  "  4    the command's own --timeout ran out before the run ended (the run goes on)",
  ...LIMIT_ROWS,
].join("\n");
