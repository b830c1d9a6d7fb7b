import { describe, expect, it } from "vitest";
import { decideInterrupt, type InterruptState } from "../../src/pod-runner/interrupts.js";

const quiet: InterruptState = {
  phase: "main",
  hasFinally: true,
  cancelled: false,
  hurried: false,
  finallyCancelled: false,
  finallyHurried: false,
  again: false,
};

describe("each interrupt acts on what runs at that moment", () => {
  it.each<[string, Partial<InterruptState>, string, string]>([
    [
      "a first one in the main tasks cancels the run",
      {},
      "cancel",
      "cancelling the run; the finally tasks still run",
    ],
    [
      "one in a main task's grace cuts it, and the finally tasks still run",
      { cancelled: true, again: true },
      "hurry",
      "killing the live task without waiting for the grace; the finally tasks still run",
    ],
    [
      "one more before the finally tasks began leaves them to run",
      { cancelled: true, hurried: true, again: true },
      "none",
      "the finally tasks still run (again, once they run, to cancel them)",
    ],
    [
      "one in a finally task cancels it with its grace",
      { phase: "finally", cancelled: true, hurried: true, again: true, finallyTask: "unlock" },
      "cancel-finally",
      "cancelling the finally task unlock: it gets its grace to stop (again to kill it at once)",
    ],
    [
      "one more in that finally task kills it at once",
      { phase: "finally", cancelled: true, finallyCancelled: true, again: true, finallyTask: "unlock" },
      "hurry-finally",
      "killing the finally task unlock without waiting for the grace",
    ],
    [
      "without finally tasks the second kills at once",
      { hasFinally: false, cancelled: true, again: true },
      "hurry",
      "received SIGINT again; killing without waiting for the grace",
    ],
  ])("%s", (_name, state, action, words) => {
    const decision = decideInterrupt({ ...quiet, ...state }, "SIGINT");
    expect(decision.action).toBe(action);
    expect(decision.message).toContain(words);
  });
});
