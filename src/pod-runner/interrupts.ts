// What each interrupt (Ctrl-C, SIGTERM, SIGHUP) does: it acts on what runs at that moment. In the
// main tasks the first cancels the run and a later one cuts the live task's grace, and the
// finally tasks still run; in the finally tasks one cancels the live cleanup (cancel file,
// SIGTERM, its own grace) and one more kills it at once.

/** Where the run is when the signal comes, and what earlier signals did. */
export interface InterruptState {
  /** "finally" once the finally tasks began */
  phase: "main" | "finally";
  hasFinally: boolean;
  /** the main tasks were cancelled (an earlier signal, or spec.cancel) */
  cancelled: boolean;
  /** the main tasks' grace was cut */
  hurried: boolean;
  finallyCancelled: boolean;
  finallyHurried: boolean;
  /** the finally task running now, when one is */
  finallyTask?: string | undefined;
  /** an earlier signal came */
  again: boolean;
}

export type InterruptAction =
  /** cancel the main tasks: cancel file, SIGTERM, the grace */
  | "cancel"
  /** cut the main tasks' grace: SIGKILL now */
  | "hurry"
  /** cancel the finally tasks: the live one gets its cancel file, SIGTERM and its grace */
  | "cancel-finally"
  /** cut the finally task's grace: SIGKILL now */
  | "hurry-finally"
  /** nothing left to do: the kill is under way */
  | "none";

export interface InterruptDecision {
  action: InterruptAction;
  /** the line the user reads */
  message: string;
}

export function decideInterrupt(state: InterruptState, signal: string): InterruptDecision {
  const received = `playbook: received ${signal}${state.again ? " again" : ""}`;
  if (state.phase === "finally") {
    const which = state.finallyTask ? `the finally task ${state.finallyTask}` : "the finally tasks";
    if (!state.finallyCancelled) {
      return {
        action: "cancel-finally",
        message: `${received}; cancelling ${which}: it gets its grace to stop (again to kill it at once)`,
      };
    }
    if (!state.finallyHurried) {
      return {
        action: "hurry-finally",
        message: `${received}; killing ${which} without waiting for the grace`,
      };
    }
    return { action: "none", message: `${received}; the finally tasks are being killed already` };
  }
  const still = state.hasFinally ? "; the finally tasks still run" : "";
  if (!state.cancelled) {
    return {
      action: "cancel",
      message: `${received}; cancelling the run${still} (again to kill the live task without waiting for the grace)`,
    };
  }
  if (!state.hurried) {
    return {
      action: "hurry",
      message: state.hasFinally
        ? `${received}; killing the live task without waiting for the grace; the finally tasks still run (again, once they run, to cancel them)`
        : `${received}; killing without waiting for the grace`,
    };
  }
  return {
    action: "none",
    message: state.hasFinally
      ? `${received}; the main tasks are being killed already; the finally tasks still run (again, once they run, to cancel them)`
      : `${received}; the run is being killed already`,
  };
}

/** The rules in `playbook run --help`'s words (the README and docs/design.md say the same). */
export const INTERRUPTS_HELP = `Ctrl-C (or SIGTERM, or SIGHUP) acts on what runs at that moment:
  main tasks      the first cancels the run: the live task gets the cancel file, SIGTERM and
                  killGrace; the next cuts that grace (SIGKILL now). The finally tasks still run.
  finally tasks   one cancels the live finally task (cancel file, SIGTERM, its own grace; the
                  rest are Skipped); one more kills it at once.
Each press says which it did. The status and report are still written; the exit code is 130.
`;
