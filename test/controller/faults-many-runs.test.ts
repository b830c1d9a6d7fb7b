// Fault: many Playbooks applied at once (a third succeed, a third time out, a third stall, under
// short limits) against `playbook controller` as a process. All settle with their reason, one
// pod each, and the controller's resident memory (VmRSS in /proc/<pid>/status) comes back near
// its idle level once they have: within IDLE_FACTOR times the idle figure plus IDLE_SLACK_MIB
// (V8 keeps some of a grown heap, so "near" allows a bounded margin, not a return to the byte).
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { freePort } from "../harness/processes.js";
import {
  type ControllerProcess,
  expectedReason,
  faultSeed,
  faultSpec,
  leftoverTaskProcesses,
  type RunKind,
  sample,
  seededRandom,
  spawnFaultController,
} from "./faults-support.js";
import { clients, createPlaybook, eventually } from "./support.js";

/**
 * 24 by default, so that the file takes under a minute inside a full CI run on 2 cores. The
 * issue's 200 is FAULTS_MANY_RUNS=200: on this 2-core machine (2026-11-30, beside other work)
 * all 200 settled correctly in 212s, controller VmRSS idle 144 MiB, peak 259 MiB, after 182 MiB.
 */
const RUNS = Number.parseInt(process.env.FAULTS_MANY_RUNS ?? "24", 10);
const KINDS: RunKind[] = ["succeeds", "timesOut", "stalls"];
/** Time for all runs to settle: pods start one after another on 2 cores, so it grows with their number. */
const SETTLE_MS = Math.max(150_000, RUNS * 1_000);
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

describe(`${RUNS} Playbooks at once`, () => {
  it(
    "all settle with their reason and one pod, and the controller's memory returns near idle",
    async () => {
      const random = seededRandom(SEED);
      const mark = `faults-${randomBytes(4).toString("hex")}`;
      const port = await freePort();
      let controller: ControllerProcess | undefined;
      try {
        controller = spawnFaultController({
          kubeconfig: inject("kubeconfig"),
          port,
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

        const kinds = new Map<string, RunKind>();
        await Promise.all(
          Array.from({ length: RUNS }, (_, i) => {
            const kind = KINDS[i % KINDS.length] as RunKind;
            const name = `many-${String(i).padStart(3, "0")}`;
            kinds.set(name, kind);
            return createPlaybook(namespace, name, faultSpec(kind, mark, random));
          }),
        );
        let peak = idle;
        let progress = "";
        const settled = await eventually(
          `all ${RUNS} runs to settle`,
          async () => {
            peak = Math.max(peak, residentMiB(running.pid));
            const items = await listPlaybooks();
            const phases = new Map<string, number>();
            for (const p of items)
              phases.set(p.status?.phase ?? "none", (phases.get(p.status?.phase ?? "none") ?? 0) + 1);
            const odd = items
              .filter((p) => {
                const reason = p.status?.conditions?.find((c) => c.type === "Succeeded")?.reason;
                return settledRun(p) && reason !== expectedReason[kinds.get(p.metadata.name) as RunKind];
              })
              .concat(items.filter((p) => p.status?.phase === "Running").slice(0, 2))
              .slice(0, 4)
              .map(
                (p) =>
                  `${p.metadata.name} ${kinds.get(p.metadata.name)}: ${JSON.stringify(p.status?.conditions?.[0])}`,
              );
            progress = `${[...phases].map(([phase, n]) => `${phase} ${n}`).join(", ")}; idle ${idle.toFixed(0)} MiB; ${odd.join("; ")}`;
            return items.length === RUNS && items.every(settledRun) ? items : undefined;
          },
          SETTLE_MS,
        ).catch((error: unknown) => {
          throw new Error(`${(error as Error).message} (${progress}; VmRSS peak ${peak.toFixed(0)} MiB)`);
        });
        const wrong: string[] = [];
        for (const playbook of settled) {
          const name = playbook.metadata.name;
          const reason = playbook.status?.conditions?.find((c) => c.type === "Succeeded")?.reason;
          const kind = kinds.get(name) as RunKind;
          if (reason !== expectedReason[kind]) wrong.push(`${name}: ${kind} ended ${reason}`);
          if (playbook.status?.podAttempts !== 1)
            wrong.push(`${name}: podAttempts ${playbook.status?.podAttempts}`);
        }
        const pods = await core.listNamespacedPod({ namespace });
        if (pods.items.length !== RUNS) wrong.push(`${pods.items.length} pods for ${RUNS} runs`);

        const metrics = await (await fetch(`${running.url}/metrics`)).text();
        for (const [kind, reason] of Object.entries(expectedReason)) {
          const counted = sample(metrics, "playbook_runs_total", { namespace, reason });
          const runs = [...kinds.values()].filter((k) => k === kind).length;
          if (counted !== runs) wrong.push(`playbook_runs_total ${reason} ${counted}, ${runs} runs`);
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
        process.stderr.write(
          `[faults] ${RUNS} runs at once: ${RUNS - wrong.length} settled correctly; controller VmRSS idle ` +
            `${idle.toFixed(0)} MiB, peak ${peak.toFixed(0)} MiB, after ${after.toFixed(0)} MiB (near: <= ${near.toFixed(0)} MiB)\n`,
        );
        expect(wrong, `seed ${SEED}`).toEqual([]);
      } finally {
        controller?.child.kill("SIGKILL");
        await controller?.exited;
      }
      expect(await leftoverTaskProcesses(mark, "many runs at once")).toEqual([]);
    },
    SETTLE_MS + 60_000,
  );
});
