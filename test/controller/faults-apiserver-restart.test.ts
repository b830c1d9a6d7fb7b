// Fault: the controller's watches are cut off, pods end and one is lost meanwhile, kube-apiserver
// is stopped, etcd is compacted past every resourceVersion the controller saw, and the API server
// is started again. A cluster of its own (the shared one must not see its API server go away),
// with a scripted node of its own; `playbook controller` as a process reaching the API server
// through a proxy the test cuts and restores. The controller's watches must come back with 410
// Gone and relist, and every run must settle once, with the ending its script wrote, whichever
// moment of the fault its pod ended in:
//   before  - while the controller watched;
//   away    - while the controller's connections were cut (the API server up);
//   lost    - the pod taken away (PodGC) while the controller was cut off: only a relist shows
//             that it is gone, and the run gets a second pod, which then ends as scripted;
//   restart - after the API server came back, before the controller's connections did;
//   back    - once the controller is connected again.
// Which run ends how and when comes from the seed (FAULTS_SEED replays a run).
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { CoreV1Api, CustomObjectsApi, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { repoRoot } from "../harness/binaries.js";
import { type DevCluster, startDevCluster } from "../harness/dev-cluster.js";
import { keepOrRemoveClusterState, suiteOutcome, whyKeepLogs } from "../harness/log-retention.js";
import { freePort, startProcess, stopProcess, waitFor } from "../harness/processes.js";
import { losePodToGc, scheduledPod, startPod } from "../harness/scripted-node.js";
import {
  type ControllerProcess,
  faultSeed,
  runEndEvents,
  sample,
  seededRandom,
  spawnFaultController,
  terminalWrites,
} from "./faults-support.js";
import { startFreezableProxy } from "./freezable-proxy.js";
import { ENDINGS, type Ending, endRun, specFor } from "./scripted-runs.js";
import { eventually, playbookManifest } from "./support.js";

const run = promisify(execFile);
const SEED = faultSeed(8);
const RUNS = Number.parseInt(process.env.FAULTS_APISERVER_RUNS ?? "15", 10);
const MOMENTS = ["before", "away", "lost", "restart", "back"] as const;
type Moment = (typeof MOMENTS)[number];

const stateDir = path.join(repoRoot(), ".cluster", `faults-apiserver-${randomBytes(3).toString("hex")}`);
const scratch = mkdtempSync(path.join(tmpdir(), "pb-faults-api-"));
let cluster: DevCluster | undefined;

beforeAll(async () => {
  await mkdir(path.dirname(stateDir), { recursive: true });
  cluster = await startDevCluster({
    stateDir,
    daemon: false,
    install: false,
    node: "scripted",
    log: () => {},
  });
}, 180_000);
// vitest passes the file's suite second; its first argument must be a destructuring pattern.
// biome-ignore lint/correctness/noEmptyPattern: no fixture is used here
afterAll(async ({}, suite) => {
  await cluster?.stop();
  rmSync(scratch, { recursive: true, force: true });
  // Its logs stay (and are named) when a test failed.
  await keepOrRemoveClusterState(stateDir, whyKeepLogs(suiteOutcome(suite)), (m) =>
    process.stderr.write(`${m}\n`),
  );
});

/** etcd's v3 HTTP gateway on the harness's etcd client port. */
async function etcd(etcdPort: number, call: string, body: Record<string, unknown>) {
  const response = await fetch(`http://127.0.0.1:${etcdPort}/v3/${call}`, {
    method: "POST",
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** etcd's current revision (the API server's newest resourceVersion), then a compaction to it. */
async function compactEtcd(etcdPort: number): Promise<number> {
  const key = Buffer.from("/").toString("base64");
  const range = await etcd(etcdPort, "kv/range", { key, limit: 1 });
  const revision = Number((range.body.header as { revision: string }).revision);
  const compacted = await etcd(etcdPort, "kv/compaction", { revision: String(revision), physical: true });
  if (compacted.status !== 200) throw new Error(`etcd compaction: HTTP ${compacted.status}`);
  return revision;
}

/** What etcd answers to a read at `revision`: its error, when the revision was compacted. */
async function readAtRevision(etcdPort: number, revision: number): Promise<string> {
  const key = Buffer.from("/registry/pods/").toString("base64");
  const answer = await etcd(etcdPort, "kv/range", { key, limit: 1, revision: String(revision) });
  return answer.status === 200 ? "ok" : String(answer.body.message ?? answer.body.error);
}

interface ListedPlaybook {
  metadata: { name: string };
  status?: { phase?: string; podAttempts?: number; conditions?: { type: string; reason: string }[] };
}

describe("kube-apiserver restarted with etcd compacted while the controller was cut off", () => {
  it(`the controller relists after 410 Gone and every run settles once with its scripted ending (${RUNS} runs, seed ${SEED})`, async () => {
    const state = cluster?.state;
    if (!state) throw new Error("no cluster");
    const etcdPort = state.ports.etcd;
    if (etcdPort === undefined) throw new Error("no etcd port");
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(state.kubeconfig);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const custom = kubeConfig.makeApiClient(CustomObjectsApi);
    const namespace = `pb-faults-api-${randomBytes(3).toString("hex")}`;
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    await waitFor(
      "the default service account",
      async () => (await core.readNamespacedServiceAccount({ namespace, name: "default" })) && true,
      { timeoutMs: 30_000 },
    );

    // The script: each run's ending and the moment of the fault its pod ends in.
    const random = seededRandom(SEED);
    const pick = <T>(from: readonly T[]): T => from[Math.floor(random() * from.length)] as T;
    const runs = Array.from({ length: RUNS }, (_, i) => ({
      name: `api-${String(i).padStart(2, "0")}`,
      ending: pick(ENDINGS) as Ending,
      // Every moment at least once, the rest drawn.
      moment: i < MOMENTS.length ? (MOMENTS[i] as Moment) : pick(MOMENTS),
    }));
    const at = (moment: Moment) => runs.filter((r) => r.moment === moment);
    const pods = new Map<string, V1Pod>();
    const end = (which: typeof runs) =>
      Promise.all(which.map((r) => endRun(core, pods.get(r.name) as V1Pod, r.ending)));

    const proxy = await startFreezableProxy(kubeConfig);
    const proxied = path.join(scratch, "kubeconfig");
    writeFileSync(proxied, proxy.kubeConfig.exportConfig());
    let controller: ControllerProcess | undefined;
    const recorded = state.processes.find((p) => p.name === "kube-apiserver");
    if (!recorded) throw new Error("no kube-apiserver in state.json");
    try {
      controller = spawnFaultController({
        kubeconfig: proxied,
        port: await freePort(),
        args: ["--namespaces", namespace, "--leader-election=false"],
      });
      const running = controller;
      const metrics = async () => (await fetch(`${running.url}/metrics`)).text();
      const readyz = async () => {
        const response = await fetch(`${running.url}/readyz`).catch(() => undefined);
        return response ? `${response.status} ${(await response.text()).trim()}` : "no answer";
      };
      await waitFor(
        "the controller to be ready",
        async () => (await readyz()).startsWith("200") || undefined,
        {
          timeoutMs: 30_000,
        },
      );
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
      const phaseOf = async (name: string) =>
        (await list()).find((p) => p.metadata.name === name)?.status?.phase ?? "";

      for (const r of runs)
        await custom.createNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          plural: PLURAL,
          namespace,
          body: playbookManifest(r.name, specFor(r.ending)),
        });
      for (const r of runs) {
        const pod = await scheduledPod(core, namespace, `${r.name}-1`);
        pods.set(r.name, await startPod(core, pod));
      }
      await waitFor(
        "every run to be Running",
        async () => ((await list()).every((p) => p.status?.phase === "Running") ? true : undefined),
        { timeoutMs: 60_000 },
      );

      await end(at("before"));
      await waitFor(
        "the runs that ended before the fault to settle",
        async () => {
          const phases = await Promise.all(at("before").map((r) => phaseOf(r.name)));
          return phases.every((p) => p === "Succeeded" || p === "Failed") || undefined;
        },
        { timeoutMs: 30_000 },
      );
      const relistsBefore = {
        pods: sample(await metrics(), "playbook_watch_relists_total", { resource: "pods" }),
        playbooks: sample(await metrics(), "playbook_watch_relists_total", { resource: "playbooks" }),
      };
      // Nothing the controller saw is newer than this.
      const seenRv = Number((await core.listNamespacedPod({ namespace })).metadata?.resourceVersion);

      // The controller's connections cut, its watches away: pods end and one is lost meanwhile.
      await proxy.cut();
      const readyzAway = await waitFor(
        "/readyz to say the API server is unreachable",
        async () => {
          const answer = await readyz();
          return answer.startsWith("503") ? answer : undefined;
        },
        { timeoutMs: 30_000 },
      );
      await end(at("away"));
      for (const r of at("lost")) await losePodToGc(core, pods.get(r.name) as V1Pod);

      // The API server stopped (its arguments kept), etcd compacted past everything the
      // controller saw, and the API server started again with the same arguments.
      const args = readFileSync(`/proc/${recorded.pid}/cmdline`, "utf8").split("\0").slice(1, -1);
      await stopProcess(recorded);
      const compactedAt = await compactEtcd(etcdPort);
      expect(compactedAt).toBeGreaterThan(seenRv + 1);
      expect(await readAtRevision(etcdPort, seenRv)).toMatch(/required revision has been compacted/);
      const restarted = startProcess("kube-apiserver", recorded.executable, args, {
        logFile: recorded.logFile,
      });
      recorded.pid = restarted.pid;
      await waitFor(
        "kube-apiserver to serve again",
        async () => {
          await run(path.join(state.binDir, "kubectl"), ["get", "--raw", "/readyz"], {
            env: { ...process.env, KUBECONFIG: state.kubeconfig },
          });
          return true;
        },
        { timeoutMs: 60_000 },
      );
      await end(at("restart"));

      // The controller reaches the API server again: its watches, resumed from what it last
      // saw, must be told 410 Gone and relist.
      await proxy.restore();
      const relistsAfter = await waitFor(
        "both watches to relist",
        async () => {
          const text = await metrics();
          const after = {
            pods: sample(text, "playbook_watch_relists_total", { resource: "pods" }),
            playbooks: sample(text, "playbook_watch_relists_total", { resource: "playbooks" }),
          };
          return after.pods > relistsBefore.pods && after.playbooks > relistsBefore.playbooks
            ? after
            : undefined;
        },
        { timeoutMs: 60_000 },
      );
      await end(at("back"));
      // The lost runs get a second pod (found only by the relist), which ends as scripted.
      for (const r of at("lost")) {
        const second = await startPod(core, await scheduledPod(core, namespace, `${r.name}-2`));
        await endRun(core, second, r.ending);
      }

      const settled = await waitFor(
        "every run to settle after the restart",
        async () => {
          const items = await list();
          return items.every((p) => ["Succeeded", "Failed"].includes(p.status?.phase ?? ""))
            ? items
            : undefined;
        },
        { timeoutMs: 60_000 },
      ).catch(async (error: unknown) => {
        const left = (await list().catch(() => [])).map((p) => `${p.metadata.name} ${p.status?.phase}`);
        throw new Error(`${(error as Error).message}: ${left.join(", ")}\n${running.output().slice(-3000)}`);
      });
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
      for (const r of runs) {
        const playbook = settled.find((p) => p.metadata.name === r.name);
        const reason = playbook?.status?.conditions?.find((c) => c.type === "Succeeded")?.reason;
        if (reason !== r.ending) wrong.push(`${r.name} (${r.moment}): scripted ${r.ending}, ended ${reason}`);
        const attempts = r.moment === "lost" ? 2 : 1;
        if (playbook?.status?.podAttempts !== attempts)
          wrong.push(
            `${r.name} (${r.moment}): podAttempts ${playbook?.status?.podAttempts}, not ${attempts}`,
          );
        const written = writes.filter((line) => line.name === r.name).length;
        if (written !== 1) wrong.push(`${r.name} (${r.moment}): ${written} terminal status writes`);
      }
      const expired = running.logLines().filter((line) => line.msg === "Watch expired, relisting").length;
      process.stderr.write(
        `[faults] seed ${SEED}: controller cut off, kube-apiserver restarted, etcd compacted at revision ` +
          `${compactedAt} (the controller had seen at most ${seenRv}); ${RUNS - wrong.length} of ${RUNS} runs ` +
          `settled as scripted (${MOMENTS.map((m) => `${m} ${at(m).length}`).join(", ")}); watch relists ` +
          `pods ${relistsBefore.pods} -> ${relistsAfter.pods}, playbooks ${relistsBefore.playbooks} -> ` +
          `${relistsAfter.playbooks}, "Watch expired" logged ${expired} times; /readyz while away: ${readyzAway}\n`,
      );
      expect(wrong, `seed ${SEED} (replay with FAULTS_SEED=${SEED})`).toEqual([]);
      expect(readyzAway).toMatch(/^503 not ready: .*API server unreachable/);
      expect(running.child.exitCode, running.output().slice(-2000)).toBeNull();
    } finally {
      controller?.child.kill("SIGKILL");
      await controller?.exited;
      await proxy.close();
    }
  }, 170_000);
});
