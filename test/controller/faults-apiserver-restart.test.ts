// Fault: kube-apiserver is stopped mid-run, etcd is compacted past every resourceVersion the
// controller holds, and the API server is started again. A cluster of its own (the shared one
// must not see its API server go away), `playbook controller` as a process. The controller's
// watches must relist (410 Gone), every run (including those that ended while the API server was
// down) must settle with its reason, and /readyz is read while the API server is away. Every
// run is Running before the API server stops, and every pod has ended before it starts again,
// so the process node must report those ends once it is back (its status retries).
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { CoreV1Api, CustomObjectsApi, KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { repoRoot } from "../harness/binaries.js";
import { PROCESS_NODE_DIR } from "../harness/control-plane.js";
import { type DevCluster, startDevCluster } from "../harness/dev-cluster.js";
import { keepOrRemoveClusterState, suiteOutcome, whyKeepLogs } from "../harness/log-retention.js";
import { freePort, startProcess, stopProcess, waitFor } from "../harness/processes.js";
import { processesWithEnv, processesWorkingUnder } from "../support/processes.js";
import {
  type ControllerProcess,
  expectedReason,
  faultSpec,
  leftoverTaskProcesses,
  type RunKind,
  sample,
  seededRandom,
  spawnFaultController,
} from "./faults-support.js";
import { playbookManifest } from "./support.js";

const run = promisify(execFile);
/** How long a succeeding task works and the timeout and stall limits of the others. */
const RUN_SECONDS = 20;
const stateDir = path.join(repoRoot(), ".cluster", `faults-apiserver-${randomBytes(3).toString("hex")}`);
let cluster: DevCluster | undefined;

beforeAll(async () => {
  await mkdir(path.dirname(stateDir), { recursive: true });
  cluster = await startDevCluster({ stateDir, daemon: false, install: false, log: () => {} });
}, 180_000);
// vitest passes the file's suite second; its first argument must be a destructuring pattern.
// biome-ignore lint/correctness/noEmptyPattern: no fixture is used here
afterAll(async ({}, suite) => {
  await cluster?.stop();
  // Its logs stay (and are named) when a test failed.
  await keepOrRemoveClusterState(stateDir, whyKeepLogs(suiteOutcome(suite)), (m) =>
    process.stderr.write(`${m}\n`),
  );
});

/** The current etcd revision, then a compaction to it, through etcd's HTTP gateway. */
async function compactEtcd(etcdPort: number): Promise<number> {
  const range = await fetch(`http://127.0.0.1:${etcdPort}/v3/kv/range`, {
    method: "POST",
    body: JSON.stringify({ key: Buffer.from("/").toString("base64") }),
  });
  const revision = Number(((await range.json()) as { header: { revision: string } }).header.revision);
  const compacted = await fetch(`http://127.0.0.1:${etcdPort}/v3/kv/compaction`, {
    method: "POST",
    body: JSON.stringify({ revision: String(revision), physical: true }),
  });
  if (!compacted.ok) throw new Error(`etcd compaction: HTTP ${compacted.status} ${await compacted.text()}`);
  return revision;
}

interface ListedPlaybook {
  metadata: { name: string };
  status?: { phase?: string; podAttempts?: number; conditions?: { type: string; reason: string }[] };
}

describe("kube-apiserver restarted mid-run with etcd compacted", () => {
  it("the controller relists, every run settles with its reason, and /readyz is read meanwhile", async () => {
    const state = cluster?.state;
    if (!state) throw new Error("no cluster");
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(state.kubeconfig);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const custom = kubeConfig.makeApiClient(CustomObjectsApi);
    const kubectl = path.join(state.binDir, "kubectl");
    const namespace = `pb-faults-api-${randomBytes(3).toString("hex")}`;
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    await waitFor(
      "the default service account",
      async () => (await core.readNamespacedServiceAccount({ namespace, name: "default" })) && true,
      { timeoutMs: 30_000 },
    );

    const mark = `faults-${randomBytes(4).toString("hex")}`;
    const random = seededRandom(8);
    const port = await freePort();
    let controller: ControllerProcess | undefined;
    try {
      controller = spawnFaultController({
        kubeconfig: state.kubeconfig,
        port,
        args: ["--namespaces", namespace, "--leader-election=false"],
      });
      const running = controller;
      const metrics = async () => (await fetch(`${running.url}/metrics`)).text();
      await waitFor(
        "the controller to be ready",
        async () =>
          (await fetch(`${running.url}/readyz`).catch(() => undefined))?.status === 200 ? true : undefined,
        { timeoutMs: 30_000 },
      );

      const kinds = new Map<string, RunKind>();
      const KINDS: RunKind[] = ["succeeds", "timesOut", "stalls"];
      for (let i = 0; i < 9; i++) {
        const kind = KINDS[i % 3] as RunKind;
        const name = `api-${i}`;
        kinds.set(name, kind);
        // Limits long enough that every run is Running before the API server goes away, on a
        // loaded machine too; they all end while it is away.
        const spec = faultSpec(kind, mark, random, RUN_SECONDS);
        await custom.createNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          plural: PLURAL,
          namespace,
          body: playbookManifest(name, spec),
        });
      }
      const list = async () =>
        (
          (await custom.listNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            plural: PLURAL,
            namespace,
          })) as {
            items: ListedPlaybook[];
          }
        ).items;
      await waitFor(
        "every run to be Running",
        async () => ((await list()).every((p) => p.status?.phase === "Running") ? true : undefined),
        { timeoutMs: 60_000 },
      );
      const relistsBefore = sample(await metrics(), "playbook_watch_relists_total");

      // Stop the API server (its arguments kept), compact etcd past everything the controller
      // has seen, and start it again with the same arguments.
      const recorded = state.processes.find((p) => p.name === "kube-apiserver");
      if (!recorded) throw new Error("no kube-apiserver in state.json");
      const args = readFileSync(`/proc/${recorded.pid}/cmdline`, "utf8").split("\0").slice(1, -1);
      await stopProcess(recorded);
      const readyzWhileDown: string[] = [];
      const etcdPort = state.ports.etcd;
      if (etcdPort === undefined) throw new Error("no etcd port");
      // Runs keep going on the node: every task ends (succeeds, or its timeout or stall fires) and
      // every pod's processes are gone while nothing is served, so each end must be reported later.
      const podFolders = path.join(state.stateDir, PROCESS_NODE_DIR);
      await waitFor(
        "every run's pod to end while the API server is down",
        async () => {
          const response = await fetch(`${running.url}/readyz`).catch(() => undefined);
          readyzWhileDown.push(`${response?.status} ${(await response?.text())?.trim()}`);
          return processesWithEnv("FAULT_MARK", mark).length === 0 &&
            processesWorkingUnder(podFolders).length === 0
            ? true
            : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 500 },
      );
      const compactedAt = await compactEtcd(etcdPort);
      const restarted = startProcess("kube-apiserver", recorded.executable, args, {
        logFile: recorded.logFile,
      });
      recorded.pid = restarted.pid;
      await waitFor(
        "kube-apiserver to serve again",
        async () => {
          await run(kubectl, ["get", "--raw", "/readyz"], {
            env: { ...process.env, KUBECONFIG: state.kubeconfig },
          });
          return true;
        },
        { timeoutMs: 60_000 },
      );

      const settled = await waitFor(
        "every run to settle after the restart",
        async () => {
          const items = await list();
          return items.every((p) => ["Succeeded", "Failed"].includes(p.status?.phase ?? ""))
            ? items
            : undefined;
        },
        { timeoutMs: 90_000 },
      ).catch(async (error: unknown) => {
        const runs = await list().catch(() => []);
        const pods = (await core.listNamespacedPod({ namespace }).catch(() => ({ items: [] }))).items;
        const controllerLog = running
          .output()
          .split("\n")
          .filter((l) => /"level":(40|50)/.test(l))
          .slice(-6);
        process.stderr.write(
          `[faults] runs: ${runs.map((r) => `${r.metadata.name} ${r.status?.phase}`).join(", ")}\n` +
            `[faults] pods: ${pods.map((p) => `${p.metadata?.name} ${p.status?.phase}`).join(", ")}\n` +
            `[faults] controller: ${controllerLog.join("\n")}\n`,
        );
        const lines = readFileSync(recorded.logFile, "utf8").split("\n");
        const telling = lines.filter((l) => /cacher|compact|429|Too large|not ready/i.test(l)).slice(-12);
        throw new Error(`${(error as Error).message}\n${telling.join("\n")}`);
      });
      const wrong: string[] = [];
      for (const playbook of settled) {
        const reason = playbook.status?.conditions?.find((c) => c.type === "Succeeded")?.reason;
        const kind = kinds.get(playbook.metadata.name) as RunKind;
        if (reason !== expectedReason[kind]) wrong.push(`${playbook.metadata.name}: ${kind} ended ${reason}`);
        if (playbook.status?.podAttempts !== 1)
          wrong.push(`${playbook.metadata.name}: podAttempts ${playbook.status?.podAttempts}`);
      }
      const relistsAfter = await waitFor(
        "the watches to relist",
        async () => {
          const relists = sample(await metrics(), "playbook_watch_relists_total");
          return relists > relistsBefore ? relists : undefined;
        },
        { timeoutMs: 30_000 },
      );
      process.stderr.write(
        `[faults] kube-apiserver restarted, etcd compacted at revision ${compactedAt}: ` +
          `${settled.length - wrong.length} of ${settled.length} runs settled correctly; ` +
          `watch relists ${relistsBefore} -> ${relistsAfter}; /readyz while down: ${[...new Set(readyzWhileDown)].join(" | ")}\n`,
      );
      expect(wrong).toEqual([]);
      expect(running.child.exitCode, running.output().slice(-2000)).toBeNull();
    } finally {
      controller?.child.kill("SIGKILL");
      await controller?.exited;
    }
    expect(await leftoverTaskProcesses(mark, "kube-apiserver restarted")).toEqual([]);
  }, 170_000);
});
