// `playbook advise cron NAME` and `-l SELECTOR` against the real API server: a CronPlaybook's
// history (its labelled Playbooks, their status written through the status subresource as the
// controller writes it) gives the proposal and the backtest, each figure by hand; the patch is
// accepted by the API server (`kubectl patch`), and a run the controller starts takes it.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parse } from "yaml";
import { CRON_PLURAL, LABEL_CRON_PLAYBOOK } from "../../src/api/cron-playbook.js";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { type CliResult, startCli } from "../support/cli.js";
import { clients, getPlaybook, kubectl, type RunningController, startController } from "./support.js";

const { core, custom } = clients();
const S = 1000;
const DAY = 24 * 3_600_000;
const T0 = Date.parse("2026-11-01T03:00:00Z");
let kubeconfig: string;
/** The history: no controller watches it. */
let history: string;
/** The controller's: the patched CronPlaybook's next run. */
let live: string;
let controller: RunningController;

const TEMPLATE = {
  ceiling: "1h",
  stall: "5m",
  tasks: [
    { name: "dump", run: "echo dump", timeout: "10m" },
    { name: "upload", run: "echo upload" },
  ],
};

function cronManifest(name: string) {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "CronPlaybook",
    metadata: { name },
    spec: {
      // Never due while the test runs: only a trigger starts a run.
      schedule: "0 0 1 1 *",
      successfulRunsHistoryLimit: 100,
      failedRunsHistoryLimit: 100,
      template: { spec: TEMPLATE },
    },
  };
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * A finished run of nightly on day `day`: dump started 5s in and took `dumpMs` (silent for 10s
 * at most), upload 20s (5s); or, `hung`, dump stopped by the 1h ceiling after 3595s.
 */
function statusOf(day: number, dumpMs: number, hung = false) {
  const start = T0 + day * DAY;
  const dumpEnd = start + 5 * S + dumpMs;
  const dump = {
    name: "dump",
    attempts: 1,
    startTime: iso(start + 5 * S),
    completionTime: iso(dumpEnd),
    longestSilence: hung ? "59m50s" : "10s",
    ...(hung
      ? { phase: "TimedOut", limit: "RunCeiling", limitValue: "1h", limitSource: "spec", exitCode: null }
      : { phase: "Succeeded", exitCode: 0 }),
  };
  const upload = hung
    ? { name: "upload", phase: "Skipped", attempts: 0 }
    : {
        name: "upload",
        phase: "Succeeded",
        attempts: 1,
        exitCode: 0,
        startTime: iso(dumpEnd),
        completionTime: iso(dumpEnd + 20 * S),
        longestSilence: "5s",
      };
  const end = hung ? dumpEnd : dumpEnd + 20 * S;
  const reason = hung ? "RunCeiling" : "Succeeded";
  return {
    phase: hung ? "Failed" : "Succeeded",
    startTime: iso(start),
    completionTime: iso(end),
    limits: {
      ceiling: { value: "1h", source: "spec" },
      stall: { value: "5m", source: "spec" },
      killGrace: { value: "10s", source: "default" },
    },
    tasks: [dump, upload],
    conditions: [
      {
        type: "Succeeded",
        status: hung ? "False" : "True",
        reason,
        message: "",
        lastTransitionTime: iso(end),
      },
    ],
  };
}

async function recordRun(namespace: string, name: string, status: object) {
  await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: PLURAL,
    namespace,
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "Playbook",
      metadata: { name, labels: { [LABEL_CRON_PLAYBOOK]: "nightly", app: "backup" } },
      spec: TEMPLATE,
    },
  });
  await custom.patchNamespacedCustomObjectStatus({
    group: GROUP,
    version: VERSION,
    plural: PLURAL,
    namespace,
    name,
    body: [{ op: "add", path: "/status", value: status }],
  });
}

function cli(args: string[]): Promise<CliResult> {
  return startCli(args, { env: { KUBECONFIG: kubeconfig } });
}

beforeAll(async () => {
  kubeconfig = inject("kubeconfig");
  history = await createTestNamespace(core, "pb-advise");
  live = await createTestNamespace(core, "pb-advise-run");
  const cron = { group: GROUP, version: VERSION, plural: CRON_PLURAL };
  await custom.createNamespacedCustomObject({ ...cron, namespace: history, body: cronManifest("nightly") });
  await custom.createNamespacedCustomObject({ ...cron, namespace: live, body: cronManifest("nightly") });
  // Eleven good runs, a day apart, dump taking 91s..101s; then one hung until the ceiling.
  for (let i = 1; i <= 11; i++) await recordRun(history, `nightly-${i}`, statusOf(i, (90 + i) * S));
  await recordRun(history, "nightly-12", statusOf(12, 3595 * S, true));
  controller = startController([live]);
}, 60_000);
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, history);
  await deleteTestNamespace(core, live);
});

describe("playbook advise cron NAME, on the runs the API server keeps", () => {
  it("proposes from the CronPlaybook's runs, with a backtest, each figure as computed by hand", async () => {
    const result = await cli(["advise", "cron", "nightly", "-n", history, "-o", "json"]);
    expect(result.code, result.stderr).toBe(0);
    const advice = JSON.parse(result.stdout);
    expect(advice).toMatchObject({ playbook: "nightly", runs: 12 });
    const [dump, upload] = advice.tasks;
    // dump: the largest of 11 (its weight's share is over 1/1000), 101s, x1.3 = 131.3s, up to
    // 30s steps: 2m30s. The attempt cut at 3595s is past it: hung.
    expect(dump.timeout).toMatchObject({
      n: 11,
      cut: 1,
      quantile: 101 * S,
      proposal: "2m30s",
      hung: [3595 * S],
    });
    expect(dump.timeout.current).toMatchObject({ value: "10m", source: "task" });
    // Its silences: 10s x1.3 = 13s, under the 1m floor. The hung one's 59m50s is past it.
    expect(dump.stall).toMatchObject({ n: 11, quantile: 10 * S, proposal: "1m" });
    // upload: 20s x1.3 = 26s: the floor. It has no timeout of its own now.
    expect(upload.timeout).toMatchObject({ n: 11, cut: 0, proposal: "1m", current: null });
    // The runs: 5s + 91..101s + 20s, the largest 126s x1.3 = 163.8s, up to 3m.
    expect(advice.ceiling).toMatchObject({ n: 11, cut: 1, proposal: "3m" });
    // The hung run took 5s + 3595s = 1h; dump's 2m30s would end it 5s + 150s = 155s in.
    expect(advice.backtest).toMatchObject({
      runs: 11,
      kills: [],
      savings: [{ run: "nightly-12", reason: "RunCeiling", tookMs: 3600 * S, endsAfterMs: 155 * S }],
      savedMs: 3445 * S,
    });
    expect(advice.warnings).toContain(
      "the run: too loose: no attempt came within 10% of its 1h (spec.ceiling); the longest was 2m6s (3.5%)",
    );
  });

  it("prints the backtest's saving on a terminal", async () => {
    const result = await cli(["advise", "cron", "nightly", "-n", history]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain(
      "Backtest: none of the last 11 successful runs would have been killed by the proposal.",
    );
    expect(result.stdout).toContain(
      "1 run ended at RunCeiling after up to 1h; with the proposal it ends after 2m35s at most: 57m25s saved",
    );
  });

  it("reads the same runs by label with -l", async () => {
    const result = await cli(["advise", "-l", "app=backup", "-n", history, "-o", "json"]);
    expect(result.code, result.stderr).toBe(0);
    const advice = JSON.parse(result.stdout);
    // Grouped by their CronPlaybook's label; the spec is the newest run's.
    expect(advice).toMatchObject({ playbook: "nightly", runs: 12, ceiling: { proposal: "3m" } });
  });

  it("gives a patch of the template that the API server takes, and the next run has its limits", async () => {
    const result = await cli(["advise", "cron", "nightly", "-n", history, "-o", "patch"]);
    expect(result.code, result.stderr).toBe(0);
    const patch = parse(result.stdout);
    expect(patch).toEqual({
      spec: {
        template: {
          spec: {
            ceiling: "3m",
            stall: "1m",
            tasks: [
              { name: "dump", run: "echo dump", timeout: "2m30s" },
              { name: "upload", run: "echo upload", timeout: "1m" },
            ],
          },
        },
      },
    });
    for (const namespace of [history, live]) {
      await kubectl([
        "-n",
        namespace,
        "patch",
        "cronplaybook",
        "nightly",
        "--type=merge",
        "-p",
        JSON.stringify(patch),
      ]);
    }
    const { stdout } = await kubectl(["-n", history, "get", "cronplaybook", "nightly", "-o", "json"]);
    expect(JSON.parse(stdout).spec.template.spec).toMatchObject(patch.spec.template.spec);
    // The controller's next run of the patched CronPlaybook is made from the new template.
    const triggered = await cli(["cron", "trigger", "nightly", "-n", live]);
    expect(triggered.code, triggered.stderr).toBe(0);
    const run = /started run [^/]+\/(\S+)/.exec(triggered.stdout)?.[1] as string;
    const made = await getPlaybook(live, run);
    expect(made.spec).toMatchObject({ ceiling: "3m", stall: "1m" });
    expect((made.spec.tasks as { timeout?: string }[]).map((t) => t.timeout)).toEqual(["2m30s", "1m"]);
  }, 60_000);

  it.each([
    [
      ["advise", "cron", "absent", "-n", "NS"],
      2,
      "get cronplaybooks.playbook.dev absent in namespace NS: not found",
    ],
    [["advise", "-l", "app=nothing", "-n", "NS"], 2, "-l app=nothing: no finished Playbook in namespace NS"],
    [["advise", "cron"], 2, "advise cron: NAME is required"],
    [["advise", "cron", "nightly", "--reports", "/tmp"], 2, "give one source of runs"],
  ])("%j exits %d naming what is wrong", async (args, code, message) => {
    const result = await cli(args.map((a) => (a === "NS" ? history : a)));
    expect(result.code).toBe(code);
    expect(result.stderr).toContain(message.replace("NS", history));
  });
});
