// One exit code per outcome (DESIGN's table), and the cluster commands' flags checked before any
// call: a script decides on the code, a person reads the flag's message.
import { describe, expect, it } from "vitest";
import { TERMINAL_REASONS } from "../../src/api/reasons.js";
import { CancelFlags, FlagError, parseFlags, SubmitFlags, WaitFlags } from "../../src/cli/cluster/flags.js";
import { EXIT, exitCodeForReason } from "../../src/cli/exit-codes.js";
import { startCli } from "../support/cli.js";

describe("exitCodeForReason", () => {
  it.each([
    ["Succeeded", 0],
    ["TaskFailed", 1],
    ["InvalidSpec", 2],
    ["PodLost", 3],
    ["RunnerLost", 3],
    ["TaskTimeout", 124],
    ["StallLimit", 124],
    ["RunCeiling", 124],
    ["PodDeadlineExceeded", 124],
    ["StartTimeout", 124],
    ["Cancelled", 130],
  ])("%s exits %i", (reason, code) => {
    expect(exitCodeForReason(reason)).toBe(code);
  });

  it("covers every terminal reason of the vocabulary", () => {
    const codes = new Set<number>(Object.values(EXIT));
    for (const reason of TERMINAL_REASONS) expect(codes).toContain(exitCodeForReason(reason));
  });

  it("treats a reason it does not know (a newer controller's) as a failure", () => {
    expect(exitCodeForReason("SomethingNew")).toBe(EXIT.failed);
  });

  it.each(["run", "wait", "cancel", "submit"])("is printed by `playbook %s --help`", async (command) => {
    const help = await startCli([command, "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain(
      "  124  a limit fired: TaskTimeout, StallLimit, RunCeiling, PodDeadlineExceeded, StartTimeout, QueueTimeout\n",
    );
    expect(help.stdout).toContain(
      "  3    the outcome was lost: PodLost, RunnerLost, Preempted, or the cluster could not be reached\n",
    );
    // 4 only where the command has a --timeout of its own to run out.
    const four = "  4    the command's own --timeout ran out before the run ended (the run goes on)\n";
    if (command === "wait" || command === "cancel") expect(help.stdout).toContain(four);
    else expect(help.stdout).not.toContain("\n  4 ");
  });
});

describe("the cluster commands' flags", () => {
  const problem = (schema: Parameters<typeof parseFlags>[0], flags: unknown) => {
    try {
      parseFlags(schema, flags);
    } catch (error) {
      expect(error).toBeInstanceOf(FlagError);
      return (error as Error).message;
    }
    throw new Error("no problem found");
  };

  it("reads --timeout as a Go duration, and 0s as none", () => {
    expect(parseFlags(WaitFlags, { name: "nightly", timeout: "1m30s" })).toEqual({
      name: "nightly",
      timeout: 90_000,
    });
    expect(parseFlags(WaitFlags, { name: "nightly", timeout: "0s" }).timeout).toBeUndefined();
    expect(parseFlags(WaitFlags, { name: "nightly" }).timeout).toBeUndefined();
  });

  it("names the flag and the value it refuses", () => {
    expect(problem(WaitFlags, { name: "nightly", timeout: "9x" })).toBe(
      '--timeout "9x" is not a duration (use units h, m, s, ms, e.g. 1h30m, 90s, 250ms)',
    );
    expect(problem(WaitFlags, { name: "nightly", timeout: "-1s" })).toBe(
      '--timeout "-1s" must not be negative',
    );
    expect(problem(WaitFlags, { name: "Nightly" })).toBe(
      `NAME "Nightly": not a Playbook name (lower case letters, digits, '-', '.')`,
    );
    expect(problem(CancelFlags, { name: "nightly", output: "xml" })).toBe("-o xml: must be json or yaml");
    expect(problem(SubmitFlags, {})).toBe("-f FILE is required");
    expect(problem(SubmitFlags, { filename: "x.yaml", namespace: "" })).toBe("-n: must name a namespace");
  });

  it("keeps the connection flags as kubectl has them", () => {
    expect(
      parseFlags(SubmitFlags, {
        filename: "x.yaml",
        kubeconfig: "/k",
        context: "dev",
        namespace: "ops",
        watch: true,
        cancelOnInterrupt: true,
        output: "json",
      }),
    ).toEqual({
      filename: "x.yaml",
      kubeconfig: "/k",
      context: "dev",
      namespace: "ops",
      watch: true,
      cancelOnInterrupt: true,
      output: "json",
    });
  });
});
