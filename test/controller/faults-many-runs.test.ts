// Fault: many Playbooks applied at once against `playbook controller` as a process, their pods on
// the scripted node. The seed writes each run's script: how it ends (a runner report of each
// reason, or an OOMKilled runner with none), whether its first pod is lost first (taken by PodGC:
// it gets a second pod), and the order in which the pods start and end, several at a time. Every
// run must end exactly once (one terminal status write) with the ending its script wrote, with
// the pods its script made and no more, each counted once in playbook_runs_total; and the
// controller's resident memory (VmRSS in /proc/<pid>/status) comes back near its idle level once
// they have: within IDLE_FACTOR times the idle figure plus IDLE_SLACK_MIB (V8 keeps some of a
// grown heap, so "near" allows a bounded margin, not a return to the byte).
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { freePort } from "../harness/processes.js";
import {
  type ControllerProcess,
  drawRuns,
  faultSeed,
  playRun,
  type RunScript,
  runEndEvents,
  sample,
  scriptedAttempts,
  seededRandom,
  spawnFaultController,
  terminalWrites,
} from "./faults-support.js";
import { ENDINGS, specFor } from "./scripted-runs.js";
import { clients, createPlaybook, eventually } from "./support.js";

/** 24 by default; the 200 is FAULTS_MANY_RUNS=200. */
const RUNS = Number.parseInt(process.env.FAULTS_MANY_RUNS ?? "24", 10);
/** Pods the script plays at once. */
const AT_ONCE = 8;
/** The share of runs whose first pod is lost. */
const LOST_SHARE = 0.15;
const SETTLE_MS = Math.max(60_000, RUNS * 500);
const IDLE_FACTOR = 1.5;
const IDLE_SLACK_MIB = 48;
const SEED = faultSeed(8);

const { core, custom } = clients();
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-faults-many");
});
afterAll(() => deleteTestNamespace(core, namespace));

function residentMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1]);
  return kib / 1024;
}

interface ListedPlaybook {
  metadata: { name: string };
  status?: {
    phase?: string;
    podAttempts?: number;
    conditions?: { type: string; reason: string; message?: string }[];
  };
}

const settledRun = (playbook: ListedPlaybook) =>
  ["Succeeded", "Failed", "Cancelled"].includes(playbook.status?.phase ?? "");

async function listPlaybooks(): Promise<ListedPlaybook[]> {
  const list = (await custom.listNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: PLURAL,
    namespace,
  })) as {
    items: ListedPlaybook[];
  };
  return list.items;
}

/** The runs in a seeded order (Fisher-Yates on the seeded source). */
function shuffled(random: () => number, runs: RunScript[]): RunScript[] {
  const order = [...runs];
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j] as RunScript, order[i] as RunScript];
  }
  return order;
}

describe(`${RUNS} Playbooks at once`, () => {
  it(
    `each ends once as its seeded script wrote, and the controller's memory returns near idle (seed ${SEED})`,
    async () => {
      const random = seededRandom(SEED);
      const runs = drawRuns(random, "many", RUNS, LOST_SHARE);
      const order = shuffled(random, runs);
      let controller: ControllerProcess | undefined;
      try {
        controller = spawnFaultController({
          kubeconfig: inject("kubeconfig"),
          port: await freePort(),
          args: [
            "--namespaces",
            namespace,
            "--leader-election-namespace",
            namespace,
            "--leader-election-id",
            "faults-many",
          ],
        });
        const running = controller;
        await eventually("the controller to be ready", async () =>
          (await fetch(`${running.url}/readyz`).catch(() => undefined))?.status === 200 ? true : undefined,
        );
        const idle = residentMiB(running.pid);
        let peak = idle;
        const sampler = setInterval(() => {
          peak = Math.max(peak, residentMiB(running.pid));
        }, 200);

        await Promise.all(runs.map((run) => createPlaybook(namespace, run.name, specFor(run.ending))));
        // The pods' lives in the seeded order, AT_ONCE at a time.
        const queue = [...order];
        await Promise.all(
          Array.from({ length: AT_ONCE }, async () => {
            for (let run = queue.shift(); run; run = queue.shift()) await playRun(core, namespace, run);
          }),
        );
        let progress = "";
        const settled = await eventually(
          `all ${RUNS} runs to settle`,
          async () => {
            const items = await listPlaybooks();
            const left = items
              .filter((p) => !settledRun(p))
              .map((p) => `${p.metadata.name} ${p.status?.phase}`);
            progress = left.slice(0, 6).join(", ");
            return items.length === RUNS && left.length === 0 ? items : undefined;
          },
          SETTLE_MS,
        ).catch((error: unknown) => {
          throw new Error(`${(error as Error).message} (seed ${SEED}; not settled: ${progress})`);
        });
        clearInterval(sampler);

        const wrong: string[] = [];
        // The log line follows the write at once, but reaches this process through a pipe.
        // What `kubectl describe` shows: each run said to have finished exactly once.
        const endEvents = await eventually(
          "one end event per run",
          async () => {
            const ends = await runEndEvents(core, namespace);
            return runs.every((r) => ends.get(r.name) === 1) ? ends : undefined;
          },
          15_000,
        ).catch(() => runEndEvents(core, namespace));
        for (const r of runs)
          if (endEvents.get(r.name) !== 1) wrong.push(`${r.name}: ${endEvents.get(r.name) ?? 0} end events`);
        const writes = await eventually(
          "every run's terminal status write in the controller's log",
          async () => {
            const lines = terminalWrites(running.logLines(), namespace);
            return runs.every((r) => lines.some((line) => line.name === r.name)) ? lines : undefined;
          },
          10_000,
        ).catch(() => terminalWrites(running.logLines(), namespace));
        for (const run of runs) {
          const playbook = settled.find((p) => p.metadata.name === run.name);
          const reason = playbook?.status?.conditions?.find((c) => c.type === "Succeeded")?.reason;
          if (reason !== run.ending) wrong.push(`${run.name}: scripted ${run.ending}, ended ${reason}`);
          if (playbook?.status?.podAttempts !== scriptedAttempts(run))
            wrong.push(
              `${run.name}: podAttempts ${playbook?.status?.podAttempts}, scripted ${scriptedAttempts(run)}`,
            );
          const written = writes.filter((line) => line.name === run.name).length;
          if (written !== 1) wrong.push(`${run.name}: ${written} terminal status writes`);
        }
        // Lost pods were force-deleted: one pod per run is left, the last one it had.
        const pods = (await core.listNamespacedPod({ namespace })).items.map((p) => p.metadata?.name ?? "");
        const expectedPods = runs.map((run) => `${run.name}-${scriptedAttempts(run)}`);
        if ([...pods].sort().join() !== [...expectedPods].sort().join())
          wrong.push(
            `pods ${pods.length} (${pods.filter((p) => !expectedPods.includes(p)).join(", ")} unexpected)`,
          );

        const metrics = await (await fetch(`${running.url}/metrics`)).text();
        for (const reason of ENDINGS) {
          const counted = sample(metrics, "playbook_runs_total", { namespace, reason });
          const scripted = runs.filter((run) => run.ending === reason).length;
          if (counted !== scripted)
            wrong.push(`playbook_runs_total ${reason} ${counted}, scripted ${scripted}`);
        }

        const near = idle * IDLE_FACTOR + IDLE_SLACK_MIB;
        let after = residentMiB(running.pid);
        await eventually(
          `resident memory to come back under ${near.toFixed(0)} MiB`,
          async () => {
            after = residentMiB(running.pid);
            return after <= near ? true : undefined;
          },
          30_000,
        ).catch(() => wrong.push(`resident memory ${after.toFixed(0)} MiB, above ${near.toFixed(0)} MiB`));
        const tally = ENDINGS.map((e) => `${e} ${runs.filter((run) => run.ending === e).length}`).join(", ");
        process.stderr.write(
          `[faults] ${RUNS} runs at once (seed ${SEED}: ${tally}; first pod lost ${runs.filter((r) => r.lostFirst).length}): ` +
            `${wrong.length} problems; controller VmRSS idle ${idle.toFixed(0)} MiB, peak ${peak.toFixed(0)} MiB, ` +
            `after ${after.toFixed(0)} MiB (near: <= ${near.toFixed(0)} MiB)\n`,
        );
        expect(wrong, `seed ${SEED} (replay with FAULTS_SEED=${SEED})`).toEqual([]);
      } finally {
        controller?.child.kill("SIGKILL");
        await controller?.exited;
      }
    },
    SETTLE_MS + 120_000,
  );
});
