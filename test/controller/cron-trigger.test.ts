// `playbook cron trigger NAME` as a user runs it against the real API server: the request it
// writes, the controller's answer it waits for and prints (a run started, or skipped by
// concurrencyPolicy Forbid), and what it says when no answer comes. stdout, stderr and the exit
// code are what is asserted.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  ANNOTATION_TRIGGER_PREFIX,
  ANNOTATION_TRIGGERED_BY,
  CRON_PLURAL,
  LABEL_CRON_PLAYBOOK,
  manualRunName,
} from "../../src/api/cron-playbook.js";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";
import { type CliResult, startCli } from "../support/cli.js";
import { clients, getPlaybook, type RunningController, startController } from "./support.js";

const { core, custom } = clients();
let kubeconfig: string;
/** No controller watches it: the test answers, or nobody does. */
let unwatched: string;
/** The controller's. */
let namespace: string;
let controller: RunningController;

beforeAll(async () => {
  kubeconfig = inject("kubeconfig");
  unwatched = await createTestNamespace(core, "pb-cron-cli");
  namespace = await createTestNamespace(core, "pb-cron-run");
  controller = startController([namespace]);
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, unwatched);
  await deleteTestNamespace(core, namespace);
});

function cli(args: string[]): Promise<CliResult> {
  return startCli(args, { env: { KUBECONFIG: kubeconfig } });
}

interface CronObject {
  metadata: { name: string; annotations?: Record<string, string>; resourceVersion: string };
  status?: {
    lastTrigger?: { id: string; run?: string; skipped?: string; handledAt: string };
    triggers?: { id: string; run?: string; skipped?: string; handledAt: string }[];
  };
}

const api = { group: GROUP, version: VERSION, plural: CRON_PLURAL };

function cronManifest(name: string, spec: Record<string, unknown> = {}) {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "CronPlaybook",
    metadata: { name },
    spec: {
      // Never due while the test runs: only triggers start runs.
      schedule: "0 0 1 1 *",
      concurrencyPolicy: "Forbid",
      template: { spec: { tasks: [{ name: "hello", run: "echo hello" }] } },
      ...spec,
    },
  };
}

async function createCron(namespace: string, name: string, spec: Record<string, unknown> = {}) {
  await custom.createNamespacedCustomObject({ ...api, namespace, body: cronManifest(name, spec) });
}

async function getCron(namespace: string, name: string): Promise<CronObject> {
  return (await custom.getNamespacedCustomObject({ ...api, namespace, name })) as CronObject;
}

/** The request ids in the CronPlaybook's trigger annotations (one each). */
function requestsOn(cron: CronObject): string[] {
  return Object.entries(cron.metadata.annotations ?? {})
    .filter(([key]) => key.startsWith(ANNOTATION_TRIGGER_PREFIX))
    .map(([, id]) => id);
}

/** Waits until the CLI's request is in its annotation, then answers it as the controller would. */
async function answerAs(namespace: string, name: string, answer: { run?: string; skipped?: string }) {
  for (let i = 0; i < 100; i++) {
    const cron = await getCron(namespace, name);
    const id = requestsOn(cron)[0];
    if (id && cron.status?.lastTrigger?.id !== id) {
      // A JSON patch (client-node sends one): the answer becomes the whole status.
      await custom.patchNamespacedCustomObjectStatus({
        ...api,
        namespace,
        name,
        body: [
          {
            op: "add",
            path: "/status",
            value: { triggers: [{ id, ...answer, handledAt: new Date().toISOString() }] },
          },
        ],
      });
      return id;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`no request on cronplaybook ${namespace}/${name}`);
}

describe("playbook cron trigger, the CLI's side", () => {
  it("prints the run the answer names and exits 0", async () => {
    await createCron(unwatched, "answered");
    const [result, id] = await Promise.all([
      cli(["cron", "trigger", "answered", "-n", unwatched]),
      answerAs(unwatched, "answered", { run: "answered-now-0123abcd" }),
    ]);
    expect(id).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z-[0-9a-f]{8}$/);
    expect(result).toEqual({
      code: 0,
      stdout: `cronplaybook ${unwatched}/answered: started run ${unwatched}/answered-now-0123abcd\n`,
      stderr: "",
    });
  });

  it("says why no run was started and exits 1", async () => {
    await createCron(unwatched, "skipped");
    const [result] = await Promise.all([
      cli(["cron", "trigger", "skipped", "-n", unwatched]),
      answerAs(unwatched, "skipped", { skipped: "concurrencyPolicy Forbid: run skipped-29000000 is active" }),
    ]);
    expect(result).toEqual({
      code: 1,
      stdout: "",
      stderr: `cronplaybook ${unwatched}/skipped: not started: concurrencyPolicy Forbid: run skipped-29000000 is active\n`,
    });
  });

  it("names what it waited for when no controller answers, leaves the request, and exits 4 (its own wait ran out; 3 is a lost outcome)", async () => {
    await createCron(unwatched, "unanswered");
    const result = await cli(["cron", "trigger", "unanswered", "-n", unwatched, "--timeout", "2s"]);
    const [id] = requestsOn(await getCron(unwatched, "unanswered"));
    expect(id).toBeDefined();
    expect(result.code).toBe(4);
    expect(result.stdout).toBe("");
    expect(result.stderr).toBe(
      `cronplaybook ${unwatched}/unanswered: no answer within --timeout 2s: waited for request ${id} in status.triggers (it has no status.lastTrigger); is the controller running and does it handle CronPlaybooks? The request stays in annotation playbook.dev/trigger-${id?.slice(-8)}\n`,
    );
  });

  it("says a CronPlaybook that is not there is not found, and exits 2", async () => {
    const result = await cli(["cron", "trigger", "absent", "-n", unwatched]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      new RegExp(
        `^playbook: patch cronplaybooks\\.playbook\\.dev absent in namespace ${unwatched}: not found \\(context \\S+, server \\S+\\)\\n$`,
      ),
    );
  });
});

describe("playbook cron trigger with the controller", () => {
  it("starts a run now, even while suspended, and a second under Forbid is not started while the first is active", async () => {
    await createCron(namespace, "nightly", { suspend: true });
    const first = await cli(["cron", "trigger", "nightly", "-n", namespace]);
    expect(first.stderr).toBe("");
    expect(first.code).toBe(0);
    const cron = await getCron(namespace, "nightly");
    const id = cron.status?.lastTrigger?.id ?? "";
    const run = manualRunName("nightly", id);
    // Answered, the request's annotation is gone.
    expect(requestsOn(cron)).toEqual([]);
    expect(first.stdout).toBe(`cronplaybook ${namespace}/nightly: started run ${namespace}/${run}\n`);
    expect(cron.status?.lastTrigger).toMatchObject({ id, run });
    const playbook = await getPlaybook(namespace, run);
    expect(playbook.metadata).toMatchObject({
      labels: { [LABEL_CRON_PLAYBOOK]: "nightly" },
      annotations: { [ANNOTATION_TRIGGERED_BY]: id },
    });
    // The run has no pod that ends (the scripted node runs nothing by itself): it stays active.
    const second = await cli(["cron", "trigger", "nightly", "-n", namespace]);
    expect(second).toEqual({
      code: 1,
      stdout: "",
      stderr: `cronplaybook ${namespace}/nightly: not started: concurrencyPolicy Forbid: run ${run} has not finished\n`,
    });
  });

  it.each([
    ["Allow", 2],
    ["Forbid", 1],
  ])(
    "two triggers at once under %s: each gets its own answer, and %i run(s) start",
    async (policy, count) => {
      // Both requests land before any controller looks: a controller that starts afterwards finds them together.
      const ns = await createTestNamespace(core, "pb-cron-both");
      try {
        const name = "both";
        await createCron(ns, name, { suspend: true, concurrencyPolicy: policy });
        const triggered = Promise.all([
          cli(["cron", "trigger", name, "-n", ns]),
          cli(["cron", "trigger", name, "-n", ns]),
        ]);
        // Both requests written, one annotation each (requests that share one annotation, as an
        // older CLI's did, leave only the last written: the controller then starts after 5s).
        await waitFor(
          "both requests on the CronPlaybook",
          async () => (requestsOn(await getCron(ns, name)).length === 2 ? true : undefined),
          { timeoutMs: 5_000, intervalMs: 100 },
        ).catch(() => undefined);
        const late = startController([ns]);
        const results = await triggered.finally(() => late.stop());
        const runs = await custom.listNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          plural: "playbooks",
          namespace: ns,
          labelSelector: `${LABEL_CRON_PLAYBOOK}=${name}`,
        });
        const names = (runs as { items: { metadata: { name: string } }[] }).items
          .map((i) => i.metadata.name)
          .sort();
        expect(names).toHaveLength(count);
        const started = results.filter((r) => r.code === 0);
        expect(started.map((r) => r.stdout.trim().replace(/.*started run \S+\//, "")).sort()).toEqual(names);
        expect(started.every((r) => r.stderr === "")).toBe(true);
        if (policy === "Forbid") {
          const [told] = results.filter((r) => r.code !== 0);
          expect(told).toEqual({
            code: 1,
            stdout: "",
            stderr: `cronplaybook ${ns}/${name}: not started: concurrencyPolicy Forbid: run ${names[0]}, started in the same pass, has not finished\n`,
          });
        }
        // Both answered, neither annotation is left.
        expect(requestsOn(await getCron(ns, name))).toEqual([]);
      } finally {
        await deleteTestNamespace(core, ns);
      }
    },
  );
});
