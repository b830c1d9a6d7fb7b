// `playbook cron trigger NAME`: what it refuses before asking anything of a cluster, in words
// naming the argument or flag and its value, with exit code 2 (test/controller/cron-trigger.test.ts
// runs it against a real API server and controller).
import { describe, expect, it } from "vitest";
import {
  ANNOTATION_TRIGGER,
  ANNOTATION_TRIGGER_PREFIX,
  CRON_PLURAL as API_CRON_PLURAL,
} from "../../src/api/cron-playbook.js";
import {
  CRON_PLURAL,
  newRequestId,
  TRIGGER_ANNOTATION,
  TRIGGER_ANNOTATION_PREFIX,
  triggerAnnotationKey,
} from "../../src/cli/cluster/cron-trigger.js";
import { CronTriggerFlags, FlagError, parseFlags } from "../../src/cli/cluster/flags.js";
import { startCli } from "../support/cli.js";

const problem = (flags: unknown) => {
  try {
    parseFlags(CronTriggerFlags, flags);
  } catch (error) {
    expect(error).toBeInstanceOf(FlagError);
    return (error as Error).message;
  }
  throw new Error("no problem found");
};

describe("cron trigger's arguments", () => {
  it("takes NAME, -n and --timeout as a Go duration", () => {
    expect(parseFlags(CronTriggerFlags, { name: "nightly", namespace: "ops", timeout: "2m" })).toEqual({
      name: "nightly",
      namespace: "ops",
      timeout: 120_000,
    });
  });

  it.each([
    [{ name: "Nightly" }, `NAME "Nightly": not a CronPlaybook name (lower case letters, digits, '-', '.')`],
    [{ name: "" }, "NAME is required"],
    [
      { name: "nightly", timeout: "soon" },
      '--timeout "soon" is not a duration (use units h, m, s, ms, e.g. 1h30m, 90s, 250ms)',
    ],
    [{ name: "nightly", timeout: "-5s" }, '--timeout "-5s" must not be negative'],
    [{ name: "nightly", namespace: "" }, "-n: must name a namespace"],
  ])("refuses %j: %s", (flags, message) => {
    expect(problem(flags)).toBe(message);
  });

  it("writes the annotation and calls the resource by the API's names (kept apart: the API module loads croner)", () => {
    expect(TRIGGER_ANNOTATION).toBe(ANNOTATION_TRIGGER);
    expect(TRIGGER_ANNOTATION_PREFIX).toBe(ANNOTATION_TRIGGER_PREFIX);
    // Each request its own annotation, so two at once do not overwrite each other.
    expect(triggerAnnotationKey("2026-12-02T03:04:05.678Z-0a1b2c3d")).toBe("playbook.dev/trigger-0a1b2c3d");
    expect(CRON_PLURAL).toBe(API_CRON_PLURAL);
  });

  it("makes request ids of the time with milliseconds and 8 hex characters", () => {
    expect(newRequestId(new Date("2026-12-02T03:04:05.678Z"), () => "0a1b2c3d")).toBe(
      "2026-12-02T03:04:05.678Z-0a1b2c3d",
    );
    expect(newRequestId()).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z-[0-9a-f]{8}$/);
    expect(newRequestId()).not.toBe(newRequestId());
  });
});

describe("playbook cron trigger, as a user runs it", () => {
  it("asks for NAME, with where to find help, and exits 2", async () => {
    const result = await startCli(["cron", "trigger"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      "error: missing required argument 'NAME'\nSee 'playbook cron trigger --help' for usage.\n",
    );
  });

  it("names a bad NAME and --timeout together before connecting, and exits 2", async () => {
    const result = await startCli(["cron", "trigger", "Nightly", "--timeout", "9x"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      `playbook: NAME "Nightly": not a CronPlaybook name (lower case letters, digits, '-', '.'); --timeout "9x" is not a duration (use units h, m, s, ms, e.g. 1h30m, 90s, 250ms)\n`,
    );
    expect(result.stdout).toBe("");
  });

  it("says there is no kubeconfig, and exits 2", async () => {
    const result = await startCli(["cron", "trigger", "nightly"], { env: { HOME: "/nonexistent-home" } });
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      "playbook: no kubeconfig: /nonexistent-home/.kube/config does not exist and KUBECONFIG is not set (or pass --kubeconfig FILE)\n",
    );
  });

  it("says in --help what each exit code means", async () => {
    const help = await startCli(["cron", "trigger", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("Usage: playbook cron trigger [options] <NAME>");
    expect(help.stdout).toContain(
      "  1    not started: the concurrencyPolicy (a run still active, or another",
    );
    expect(help.stdout).toContain("  3    the cluster could not be reached\n");
    expect(help.stdout).toContain("  4    no answer from the controller within --timeout");
  });

  it("lists trigger under `playbook cron`", async () => {
    const help = await startCli(["cron", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/\n {2}trigger \[options\] <NAME> +start a CronPlaybook's run now/);
  });
});
